"""Adapters and the composition root: Kubernetes, SDN dialects, tapes, CLI.

The only layer that does I/O against the outside world; imports engine and machines.
"""

__version__ = "0.1.0"
