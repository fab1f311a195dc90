"""`nicplug_build_info` says which flavour a controller serves, as its operations'
durations are labelled."""

from __future__ import annotations

import platform

import pytest

from nicplug.adapters import __version__
from nicplug.adapters.core.controller import Controller
from nicplug.adapters.core.settings import Settings


@pytest.mark.parametrize(("dialect", "flavour"), [("deckhouse", "deckhouse"),
                                                  ("multus", "kubevirt")])
def test_build_info_names_the_flavour(dialect: str, flavour: str) -> None:
    metrics = Controller(Settings(dialect=dialect)).metrics  # type: ignore[arg-type]
    labels = {"version": __version__, "python": platform.python_version(), "flavour": flavour}
    assert metrics.registry.get_sample_value("nicplug_build_info", labels) == 1
    assert metrics.flavour == flavour
    assert metrics.registry.get_sample_value("nicplug_build_info_created", labels) is None
