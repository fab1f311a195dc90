"""The sample tapes, the replay options each needs, and their golden replay outputs.

    python -m tests.tapes.goldens      # rewrite every *.golden.json from its tape
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.adapters.demo.scenarios import SCENARIOS, Outcome
from tests.tapes.kubectl_tapes import TAPE as KUBECTL_TAPE
from tests.tapes.recording import HERE, replay_args, slug


@dataclass(frozen=True)
class SampleTape:
    name: str
    tape: Path
    args: tuple[str, ...]
    outcomes: tuple[Outcome, ...]

    @property
    def golden(self) -> Path:
        return HERE / f"{self.name}.golden.json"


SAMPLES: tuple[SampleTape, ...] = (
    *(SampleTape(slug(s), HERE / f"{slug(s)}.tape.jsonl", tuple(replay_args(s)), s.outcomes)
      for s in SCENARIOS),
    SampleTape("kubectl-plug-with-snapshots", KUBECTL_TAPE, (),
               (Outcome("default/vm-00000", "Network/user-net", "plug", "Attached"),)),
)


def replay_output(sample: SampleTape, *extra: str) -> tuple[int, bytes]:
    result = CliRunner().invoke(
        app, ["replay", str(sample.tape), "--json", *sample.args, *extra]
    )
    return result.exit_code, result.stdout_bytes


if __name__ == "__main__":
    for sample in SAMPLES:
        code, output = replay_output(sample)
        assert code == 0, (sample.name, code)
        sample.golden.write_bytes(output)
