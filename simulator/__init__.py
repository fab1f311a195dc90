"""The simulated cluster: a Kubernetes API server with KubeVirt, virt-handler and SDN
behaviour, for the demo, the integration tests and the benchmarks.

It stands apart: it never imports `nicplug.engine`, `nicplug.machines` or
`nicplug.adapters`, so it cannot share the controller's bugs.
"""
