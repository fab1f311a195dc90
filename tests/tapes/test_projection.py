"""The cache keeps only what nicplug reads of each object: replaying every sample tape
with each object cut down to that projection gives the golden output byte for byte,
so nothing the decisions depend on is dropped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from nicplug.adapters.core.worldview import cache_projection
from nicplug.adapters.kube.flavour import ALL_WATCHED
from tests.tapes.goldens import SAMPLES, SampleTape, replay_output

LINE_TAPES = [s for s in SAMPLES if s.tape.suffix == ".jsonl"]  # one event a line


def _projected(line: bytes) -> tuple[bytes, int]:
    """The line with its object projected, and how many bytes that saved."""
    event = orjson.loads(line)
    obj = event.get("object")
    if not isinstance(obj, dict):
        return line, 0
    kind = next((k for k in ALL_WATCHED if k.api_version == obj.get("apiVersion")
                 and k.kind == obj.get("kind")), None)
    project = cache_projection(kind) if kind is not None else None
    if project is None:
        return line, 0
    out = orjson.dumps({**event, "object": project(obj)})
    return out, len(line) - len(out)


@pytest.mark.parametrize("sample", LINE_TAPES, ids=[s.name for s in LINE_TAPES])
def test_a_tape_of_projected_objects_replays_to_the_golden_output(
    sample: SampleTape, tmp_path: Path
) -> None:
    lines = [_projected(line) for line in sample.tape.read_bytes().splitlines() if line]
    assert sum(saved for _, saved in lines) > 0  # the projection does drop something
    tape = tmp_path / sample.tape.name
    tape.write_bytes(b"".join(line + b"\n" for line, _ in lines))
    code, output = replay_output(replace(sample, tape=tape))
    assert code == 0
    assert output == sample.golden.read_bytes()
