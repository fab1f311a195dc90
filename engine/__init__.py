"""The generic engine: journal, runtime, dispatch, clock, errors.

It runs many small persisted state machines and knows nothing of VMs or networks:
it must never import `nicplug.machines`, `nicplug.adapters` or `nicplug.simulator`.
"""
