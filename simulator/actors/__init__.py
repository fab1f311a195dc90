"""The behaviour inside the simulated cluster: KubeVirt, virt-handler, the SDN agents.

Each actor watches the store (`Store.subscribe`) and acts through ordinary writes, as the
real component acts through the API server; none of them calls another directly.
"""
