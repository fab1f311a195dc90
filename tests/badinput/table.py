"""Every bad input tried against the CLI, as data: what was given, what must come back.

Each row is run as a real `nicplug` process (`test_table.py`): the exit code is the
row's, the last line of stderr is one `nicplug: ...` line holding the row's words,
nothing prints a traceback or hangs, and a journal it refuses is left with nothing
beside it. The same rows are the "Bad input" table of docs/operations.md:

    python -m tests.badinput.table      # print the table for the docs
"""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tests.queries.journal_worlds import filled_journal

HERE = Path(__file__).parent
PLUG_TAPE = HERE.parent / "tapes" / "live-hotplug-a-network.tape.jsonl"
VM = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine"}


class Scratch:
    """The files and sockets the rows need, made in `root` when first asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._sockets: list[socket.socket] = []

    def file(self, name: str, data: bytes) -> str:
        path = self.root / name
        path.write_bytes(data)
        return str(path)

    def tape(self, name: str, lines: list[object]) -> str:
        return self.file(name, b"".join(json.dumps(x).encode() + b"\n" for x in lines))

    def directory(self, name: str) -> str:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return str(path)

    @cached_property
    def journal(self) -> Path:
        return filled_journal(self.root / "journal.db")

    def journal_copy(self, name: str, *statements: str) -> str:
        """A copy of the journal byte for byte (in WAL mode, as a controller leaves it,
        with no `-wal`/`-shm` beside it), changed by `statements`."""
        path = self.root / name
        shutil.copyfile(self.journal, path)
        copy = sqlite3.connect(path)
        try:
            for statement in statements:
                copy.execute(statement)
            copy.commit()
        finally:
            copy.close()
        assert not Path(f"{path}-wal").exists()
        return str(path)

    def read_only_journal(self) -> str:
        """A journal no controller holds, in a directory nobody may write."""
        place = self.root / "read-only"
        place.mkdir()
        path = Path(self.journal_copy("read-only/journal.db"))
        path.chmod(0o644)
        place.chmod(0o555)
        return str(path)

    def read_only_crashed_journal(self) -> str:
        """A journal whose writer died holding it (its `-wal` holds a commit the file
        does not), copied with its `-wal`/`-shm` into a directory nobody may write."""
        live = Path(self.journal_copy("crashed.db"))
        writer = sqlite3.connect(live)
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE streams SET state = 'Cancelled' WHERE key = 'ns/staged'")
        writer.commit()
        place = self.root / "read-only"
        place.mkdir()
        for suffix in ("", "-wal", "-shm"):
            shutil.copyfile(f"{live}{suffix}", place / f"journal.db{suffix}")
            (place / f"journal.db{suffix}").chmod(0o444)
        writer.close()
        place.chmod(0o555)
        return str(place / "journal.db")

    def kubeconfig(self) -> str:
        """A kubeconfig that loads (nothing listens where it points)."""
        return self.file("kubeconfig", json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        }).encode())

    def busy_address(self) -> str:
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        self._sockets.append(listening)
        return f"127.0.0.1:{listening.getsockname()[1]}"

    def close(self) -> None:
        for s in self._sockets:
            s.close()
        if (self.root / "read-only").exists():
            (self.root / "read-only").chmod(0o755)  # so the scratch can be removed


@dataclass(frozen=True)
class BadInput:
    kind: str
    given: str
    argv: Callable[[Scratch], list[str]]
    code: int
    says: str
    """Words the one line on stderr holds ("" for a row that prints no error)."""
    outcome: str
    as_nobody: bool = False
    """Run without root's power to write anywhere (a read-only place means one)."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables the process is given besides the test's."""


def _line(type_: str, obj: object, at: str | None = None) -> dict[str, object]:
    return {"type": type_, "object": obj, **({"at": at} if at else {})}


_REVERSED = [json.loads(line) for line in PLUG_TAPE.read_text().splitlines()][::-1]
_DEEP = b'{"type": "ADDED", "object": ' + b'{"a": ' * 100_000 + b"{}" + b"}" * 100_001 + b"\n"
_BIG = b'{"type": "ADDED", "object": {"x": "' + b"a" * (20 * 2**20) + b'"}}\n'


def _run(s: Scratch, *flags: str) -> list[str]:
    return ["run", "--journal", str(s.root / "run.db"), "--query-addr", "", *flags]


ROWS: tuple[BadInput, ...] = (
    # -- tapes ------------------------------------------------------------------------
    BadInput("tape", "an event whose object has no `metadata`, `--strict`",
             lambda s: ["replay", "--strict", s.tape("t1", [_line("ADDED", VM)])],
             1, "line 1: ADDED VirtualMachine: the object has no metadata",
             "refused; without `--strict` reported with its line, the rest replays"),
    BadInput("tape", "`metadata` a string, `--strict`",
             lambda s: ["replay", "--strict", s.tape("t2", [
                 _line("ADDED", {**VM, "metadata": "ns/vm"})])],
             1, "line 1: ADDED VirtualMachine: the object's metadata is a str",
             "refused with its line number"),
    BadInput("tape", "an object with no `metadata.name`, `--strict`",
             lambda s: ["replay", "--strict", s.tape("t3", [
                 _line("MODIFIED", {**VM, "metadata": {"namespace": "ns"}})])],
             1, "line 1: MODIFIED VirtualMachine: the object has no metadata.name",
             "refused with its line number"),
    BadInput("tape", "a namespaced object with no namespace, `--strict`",
             lambda s: ["replay", "--strict", s.tape("t4", [
                 _line("ADDED", {**VM, "metadata": {"name": "vm"}})])],
             1, "the object has no metadata.namespace", "refused with its line number"),
    BadInput("tape", "lines reversed (time going backwards)",
             lambda s: ["replay", "--json", s.tape("t5", _REVERSED)],
             0, f"line {len(_REVERSED)}: time goes backwards",  # the last reported: the earliest
             "every such line reported; each taken at the clock's time"),
    BadInput("tape", "lines reversed, `--strict`",
             lambda s: ["replay", "--strict", s.tape("t6", _REVERSED)],
             1, "line 2: time goes backwards", "refused at the first such line"),
    BadInput("tape", "one 20 MiB line",
             lambda s: ["replay", "--json", s.file("t7", _BIG)],
             0, "line 1: a line of 20971558 bytes, longer than the 16777216",
             "skipped unread (memory stays within the 16 MiB cap), the rest replays"),
    BadInput("tape", "a value that never closes, `--strict`",
             lambda s: ["replay", "--strict", s.file("t8", b'{"type": "ADDED", "object"')],
             1, "line 1: a JSON object that never closes (end of tape)",
             "refused; piped 300 MB long it costs about the cap in memory (`tests/tapes`)"),
    BadInput("tape", "CRLF line ends and a UTF-8 byte order mark, `--strict`",
             lambda s: ["replay", "--strict", "--json", s.file(
                 "t9", b"\xef\xbb\xbf" + PLUG_TAPE.read_bytes().replace(b"\n", b"\r\n"))],
             0, "", "read as the LF tape: the same report byte for byte"),
    BadInput("tape", "binary garbage, `--strict`",
             lambda s: ["replay", "--strict", s.file("t10", bytes(range(256)) * 64)],
             1, "line 1: not a JSON object", "refused with its line number"),
    BadInput("tape", "a line nested 100,000 deep, `--strict`",
             lambda s: ["replay", "--strict", s.file("t11", _DEEP)],
             1, "line 1: JSON nested too deeply to read", "refused with its line number"),
    BadInput("tape", "a tape that does not exist",
             lambda s: ["replay", str(s.root / "nowhere.jsonl")],
             2, "cannot read the tape", "nothing replayed"),
    BadInput("tape", "a directory as the tape",
             lambda s: ["replay", s.directory("tapes")],
             2, "cannot read the tape", "nothing replayed"),
    BadInput("tape", "`--until` neither a time nor `+DURATION`",
             lambda s: ["replay", str(PLUG_TAPE), "--until", "+soon"],
             2, "--until", "usage error"),
    BadInput("tape", "`replay --journal` naming an existing file",
             lambda s: ["replay", str(PLUG_TAPE), "--journal", str(s.journal)],
             2, "a replay writes a new journal", "the file is left as it was"),
    # -- the controller's options -------------------------------------------------------
    BadInput("controller", "`--metrics-addr` already in use (a second controller)",
             lambda s: _run(s, "--metrics-addr", s.busy_address()),
             1, "the address is in use", "exits before anything starts"),
    BadInput("controller", "`--metrics-addr` not an address of this host",
             lambda s: _run(s, "--metrics-addr", "192.0.2.1:0"),
             1, "192.0.2.1 is not an address of this host", "exits before anything starts"),
    BadInput("controller", "`--metrics-addr` an unknown host",
             lambda s: _run(s, "--metrics-addr", "no-such-host.invalid:0"),
             1, "unknown host 'no-such-host.invalid'", "exits before anything starts"),
    BadInput("controller", "`--metrics-addr` not HOST:PORT",
             lambda s: _run(s, "--metrics-addr", "8080"),
             2, "expected HOST:PORT", "usage error"),
    BadInput("controller", "`--flavour` unknown",
             lambda s: _run(s, "--flavour", "multus"),
             2, "unknown flavour 'multus': choose deckhouse or kubevirt", "usage error"),
    BadInput("controller", "`--flavour` and the deprecated `--dialect` disagree",
             lambda s: _run(s, "--flavour", "kubevirt", "--dialect", "deckhouse"),
             2, "--flavour kubevirt and --dialect deckhouse disagree", "usage error"),
    BadInput("controller", "`--kubeconfig` a directory",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0",
                            "--kubeconfig", s.directory("kube")),
             1, "is a directory; give the kubeconfig file in it", "exits before connecting"),
    BadInput("controller", "`--kubeconfig` that does not exist",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0",
                            "--kubeconfig", str(s.root / "nope")),
             1, "does not exist", "exits before connecting"),
    BadInput("controller", "`--record-tape` where nothing may be written",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig", s.kubeconfig(),
                            "--record-tape", "/proc/run.tape.jsonl"),
             1, "cannot write the tape /proc/run.tape.jsonl", "exits before it leads"),
    BadInput("controller", "`--namespaces` naming none (`,,,`)",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig", s.kubeconfig(),
                            "--namespaces", ",,,"),
             2, "--namespaces: ',,,' names no namespace", "usage error, not every namespace"),
    BadInput("controller", "`--namespaces` empty",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig", s.kubeconfig(),
                            "--namespaces", ""),
             2, "--namespaces: '' names no namespace", "usage error, not every namespace"),
    BadInput("controller", "`NICPLUG_NAMESPACES` set and empty",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig", s.kubeconfig()),
             2, "--namespaces: '' names no namespace", "usage error, not every namespace",
             env=(("NICPLUG_NAMESPACES", ""),)),
    BadInput("controller", "`--namespaces` with an empty name (`ns1,,ns2`)",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig", s.kubeconfig(),
                            "--namespaces", "ns1,,ns2"),
             2, "--namespaces: an empty name in 'ns1,,ns2'", "usage error"),
    BadInput("controller", "`--namespaces` not a namespace name",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig", s.kubeconfig(),
                            "--namespaces", "ns1,Prod_2"),
             2, "'Prod_2' is not a namespace name", "usage error"),
    *(BadInput("controller", f"`--attach-timeout {value}`",
               lambda s, value=value: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig",
                                           s.kubeconfig(), "--attach-timeout", value),
               2, f"--attach-timeout: {says}", "usage error")
      for value, says in (("inf", "a duration is like 30s"),
                          ("nan", "a duration is like 30s"),
                          ("-5", "a duration is like 30s"),
                          ("0", "Input should be greater than 0"))),
    *(BadInput("controller", f"`--created-objects-retention {value}`",
               lambda s, value=value: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig",
                                           s.kubeconfig(), "--created-objects-retention",
                                           value),
               2, f"--created-objects-retention: {says}", "usage error, nothing deleted")
      for value, says in (("1x", "a duration is like 30s"),
                          ("0", "Input should be greater than 0"))),
    BadInput("controller", "`--retention 2x`",
             lambda s: _run(s, "--metrics-addr", "127.0.0.1:0", "--kubeconfig",
                            s.kubeconfig(), "--retention", "2x"),
             2, "--retention: a duration is like 30s", "usage error, nothing archived"),
    BadInput("controller", "`--journal` a directory",
             lambda s: ["run", "--journal", s.directory("journal-dir"), "--metrics-addr",
                        "127.0.0.1:0", "--kubeconfig", s.kubeconfig()],
             2, "is a directory; name the journal file in it", "usage error, before the Lease"),
    BadInput("controller", "`--journal` in a directory that does not exist",
             lambda s: ["run", "--journal", str(s.root / "nowhere" / "j.db"), "--metrics-addr",
                        "127.0.0.1:0", "--kubeconfig", s.kubeconfig()],
             2, "no directory", "usage error, before the Lease"),
    BadInput("journal", "`run` on a journal `journal verify` rejects (read model off its events)",
             lambda s: ["run", "--journal", s.journal_copy(
                 "unverified.db", "UPDATE streams SET state = 'Cancelled' "
                 "WHERE key = 'ns/staged'"), "--metrics-addr", "127.0.0.1:0",
                        "--kubeconfig", s.kubeconfig()],
             1, "mismatches between the events and what the journal keeps from them",
             "exits before anything connects; the journal left as it was"),
    # -- files the CLI writes ---------------------------------------------------------------
    BadInput("files", "`record -o` a directory",
             lambda s: ["record", "--kubeconfig", s.kubeconfig(), "-o", s.directory("tape-dir")],
             1, "cannot write the tape", "nothing recorded, nothing connected"),
    BadInput("files", "`journal export -o` a directory",
             lambda s: ["journal", "export", "--journal", str(s.journal),
                        "-o", s.directory("out")],
             2, "is a directory; name a file", "nothing written"),
    BadInput("files", "`journal export -o` where nothing may be written",
             lambda s: ["journal", "export", "--journal", str(s.journal),
                        "-o", "/proc/export.jsonl"],
             2, "cannot write in /proc", "nothing written"),
    BadInput("files", "`journal export -o` the journal itself",
             lambda s: ["journal", "export", "--journal", str(s.journal), "-o", str(s.journal)],
             2, "is the journal itself", "the journal is untouched"),
    BadInput("files", "`demo --dir` an existing file",
             lambda s: ["demo", "--dir", s.file("plain-file", b"x")],
             2, "exists and is not a directory", "nothing started"),
    # -- journals the queries are given ---------------------------------------------------------
    BadInput("journal", "a journal that does not exist",
             lambda s: ["status", "--journal", str(s.root / "nowhere.db")],
             1, "no journal file here", "nothing created"),
    BadInput("journal", "random bytes as the journal",
             lambda s: ["status", "--journal", s.file("garbage.db", bytes(range(256)) * 64)],
             1, "is corrupt or not an SQLite journal", "left as it was, nothing beside it"),
    BadInput("journal", "an empty file as the journal",
             lambda s: ["status", "--journal", s.file("empty.db", b"")],
             1, "not a nicplug journal", "left as it was, nothing beside it"),
    BadInput("journal", "a journal of a newer schema",
             lambda s: ["status", "--journal", s.journal_copy(
                 "newer.db", "PRAGMA user_version = 99")],
             1, "written by a newer nicplug", "left as it was, nothing beside it"),
    BadInput("journal", "payloads that are not JSON",
             lambda s: ["status", "--journal", s.journal_copy(
                 "undecodable.db", "UPDATE streams SET snapshot = '{not json'")],
             1, "holds content this nicplug cannot read", "exit 1 naming the journal"),
    BadInput("journal", "payloads of the wrong shape",
             lambda s: ["status", "--journal", s.journal_copy(
                 "shapes.db", "UPDATE streams SET snapshot = '[]'")],
             1, "holds content this nicplug cannot read", "exit 1 naming the journal"),
    BadInput("journal", "a journal nobody holds, in a read-only directory",
             lambda s: ["status", "--journal", s.read_only_journal()],
             0, "", "answered, read as a snapshot (it says so); nothing created",
             as_nobody=True),
    BadInput("journal", "a crashed controller's journal with its `-wal`/`-shm`, read-only",
             lambda s: ["status", "--state", "Cancelled", "--vm", "ns/staged", "--journal",
                        s.read_only_crashed_journal()],
             0, "", "answered through the WAL (its last commit included); nothing created",
             as_nobody=True),
    BadInput("journal", "`--vm` not NAMESPACE/NAME",
             lambda s: ["status", "--journal", str(s.journal), "--vm", "Bad Name"],
             2, "a VM is NAMESPACE/NAME", "usage error"),
)


def markdown() -> str:
    """The rows as the docs' table."""
    lines = ["| kind | input | exit | the one line says | result |",
             "|---|---|---|---|---|"]
    for row in ROWS:
        says = f"`{row.says}`" if row.says else "(no error)"
        lines.append(f"| {row.kind} | {row.given} | {row.code} | {says} | {row.outcome} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
