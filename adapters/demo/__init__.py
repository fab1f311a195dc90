"""`nicplug demo`: simulated clusters and controllers as real processes, scenarios a
KubeVirt operator recognises, a live board of operations, and a verdict."""
