from nicplug.machines.world import NetworkSpec, if_name_of


def test_if_name_is_stable_short_and_prefixed() -> None:
    name = if_name_of("Network", "user-net")
    assert name.startswith("veth_n") and len(name) == 14
    assert name == if_name_of("Network", "user-net")
    assert len(if_name_of("ClusterNetwork", "a" * 200)) <= 15
    assert if_name_of("Main", "") == "default"


def test_identity() -> None:
    assert NetworkSpec("Main").identity == "Main"
    assert NetworkSpec("ClusterNetwork", "storage", 3).identity == "ClusterNetwork/storage"
