"""The hotplug domain: comparator, gating, plug and unplug machines.

Pure code: no `await`, no I/O. Imports `nicplug.engine` only, never `nicplug.adapters`.
"""
