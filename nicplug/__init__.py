"""nicplug: NIC hotplug for running KubeVirt VMs as journaled state machines."""

__version__ = "0.1.0"
