"""Opening an SQLite journal file safely, or refusing to.

Creates a missing file with mode 0600 before SQLite sees it, checks that an existing
one is a healthy nicplug journal (integrity check, schema not newer than this code),
and translates SQLite's errors into `JournalRefused` with what to do about them.
Never deletes, truncates or recreates a file: a journal that cannot be opened is left
exactly as it was found, and a reader never leaves a file beside it (`ReadMode`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from nicplug.engine.errors import JournalError, JournalRefused
from nicplug.engine.schema import latest_version, migrate, schema_version

IntegrityCheck = Literal["full", "quick", "bounded", "none"]
"""What opening checks. `full`: `integrity_check` of the whole file; `quick`:
`quick_check` of the whole file (reads every page: 0.4 s for 300 MB, seconds under
load); `bounded`: `quick_check` of every table but the events (the read model, outbox,
timers and archive list, which recovery reads whole), at a cost that follows the live
state and retention, not the history: the whole file is then checked apart
(`check_file`), after start; and nothing at all when the last writer closed the journal
cleanly after the whole file passed that check (`closed_clean`: nothing moved since);
`none`: nothing beyond what SQLite checks on every read."""
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

MEMORY = ":memory:"

ReadMode = Literal["shared", "snapshot"]
"""How a reader opens a journal. `shared`: a WAL reader beside the writer, through the
writer's `-shm` index, so it sees every commit in one consistent snapshot. `snapshot`:
when no `-wal`/`-shm` is beside the file, no writer holds it (a stopped controller, a
backup, a read-only place); it is read as an immutable file, which creates nothing
beside it and needs no write access to its directory. A WAL reader would create both
files and leave them behind, even beside a journal it then refuses."""


def read_mode(path: str) -> ReadMode:
    """`shared` when a writer holds the journal (or left its WAL), else `snapshot`."""
    beside = (Path(f"{path}-wal"), Path(f"{path}-shm"))
    return "shared" if any(p.exists() for p in beside) else "snapshot"


def reader_uri(path: str, mode: ReadMode) -> str:
    uri = f"file:{quote(path)}?mode=ro"
    return uri + "&immutable=1" if mode == "snapshot" else uri


def prepare_file(path: str, *, read_only: bool) -> None:
    """Create the journal file (0600) when missing; refuse paths that cannot work."""
    target = Path(path)
    if read_only:
        if not target.is_file():
            raise JournalRefused(
                path, "no journal file here", "give the path of an existing journal"
            )
        return
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        if not target.is_file():
            raise JournalRefused(
                path, "exists but is not a regular file", "give the path of a journal file"
            ) from None
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError as error:
            raise unwritable(path, error) from error
        return
    except OSError as error:
        raise unwritable(path, error) from error
    os.close(fd)


def hold(path: str, *, exclusive: bool) -> int:
    """Take the journal's writer lock (`flock` on the file, apart from SQLite's own
    locks) and return the descriptor that holds it until closed. Controllers share it;
    offline work (`journal rebuild`, a restore) takes it alone, and each refuses while
    the other holds it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        if exclusive:
            raise JournalRefused(
                path, "is open for writing by a running nicplug",
                "stop the controller first; this works on a journal nobody writes",
            ) from None
        raise JournalRefused(
            path, "is held by an offline nicplug command (rebuild or restore)",
            "wait for it to finish, then start again",
        ) from None
    except OSError:
        os.close(fd)
        raise
    return fd


def unwritable(path: str, error: OSError) -> JournalRefused:
    reason = error.strerror or str(error)
    if error.errno == errno.ENOSPC:
        return JournalRefused(path, "the disk is full", "free space, then start again")
    return JournalRefused(
        path,
        f"cannot be written ({reason})",
        "choose a path in a writable directory, or fix its permissions",
    )


def translate(error: sqlite3.Error, path: str) -> JournalError:
    """SQLite's error as the journal's own."""
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary == sqlite3.SQLITE_FULL:
        return JournalRefused(
            path,
            "the disk (or the journal's size limit) is full; the unit was not committed",
            "free space or raise the limit; every acknowledged event is kept",
        )
    if primary in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
        return corrupt(path, str(error))
    if primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM,
                   sqlite3.SQLITE_IOERR):
        return JournalRefused(
            path, f"cannot be written ({error})", "check the path, its permissions and the disk"
        )
    return JournalError(f"journal {path}: {error}")


def corrupt(path: str, detail: str) -> JournalRefused:
    detail = " ".join(detail.split())  # SQLite's findings span lines; a refusal is one
    if len(detail) > 300:
        detail = detail[:297] + "..."
    return JournalRefused(
        path,
        f"is corrupt or not an SQLite journal ({detail})",
        "restore it from a backup or move it aside; nicplug never recreates a journal",
    )


def _checked(conn: sqlite3.Connection, integrity: IntegrityCheck) -> list[str]:
    if integrity != "bounded":
        pragma = "integrity_check" if integrity == "full" else "quick_check"
        return [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}").fetchall()]
    tables = [str(r[0]) for r in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name != 'events'"
        " ORDER BY name")]
    problems = []
    for table in tables:  # a name from the schema itself, quoted as SQL wants
        quoted = table.replace('"', '""')
        problems += [str(r[0]) for r in conn.execute(f'PRAGMA quick_check("{quoted}")')]
    return [p for p in problems if p != "ok"] or ["ok"]


def closed_clean(conn: sqlite3.Connection) -> bool:
    """Whether the last writer closed the journal cleanly after its whole file passed
    the check (`mark_clean`), and no writer opened it since: nothing moved since that
    check, so `bounded` checks nothing at open (`check_file` runs after start)."""
    table = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'clean_close'"
    ).fetchone()
    return table is not None and conn.execute("SELECT 1 FROM clean_close").fetchone() is not None


def mark_clean(conn: sqlite3.Connection, lock: int, closed_wall: float) -> bool:
    """Leave the clean-close mark, when this is the last writer (its shared writer lock
    becomes exclusive: nobody else writes, nobody can start to). Returns whether it did;
    a failure leaves no mark, so the next open checks as after a crash."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # another writer holds it: it leaves the mark, or nobody does
    try:
        conn.execute("INSERT OR REPLACE INTO clean_close (id, closed_wall) VALUES (1, ?)",
                     (closed_wall,))
    except sqlite3.Error:
        return False
    return True


def check_file(conn: sqlite3.Connection) -> list[str]:
    """`quick_check` of the whole file on `conn`, a read connection of its own (see
    `checker`), closed after; the findings, `["ok"]` for a healthy file. Runs
    synchronously: give it a thread (`conn.interrupt()` from another ends it early)."""
    try:
        return [str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as error:
        return [str(error)]
    finally:
        conn.close()


def checker(path: str) -> sqlite3.Connection:
    """A read-only connection for `check_file`: beside a writer it reads one consistent
    snapshot and holds nobody up (WAL)."""
    try:
        return sqlite3.connect(
            reader_uri(path, read_mode(path)), uri=True, check_same_thread=False
        )
    except sqlite3.Error as error:
        raise translate(error, path) from error


def configure(
    conn: sqlite3.Connection,
    *,
    path: str,
    read_only: bool,
    synchronous: Synchronous,
    integrity: IntegrityCheck,
    size_limit_bytes: int | None,
) -> int:
    """Pragmas, health checks and migrations; returns the schema version."""
    try:
        conn.execute("PRAGMA schema_version").fetchone()
        if not read_only and schema_version(conn) == 0:
            # a new journal gives space freed by retention back in steps, without VACUUM;
            # only an empty file takes it: switching to WAL already writes its header
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        if path != MEMORY and not read_only:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise JournalRefused(path, f"cannot use WAL (got {mode})", "use a local disk")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA busy_timeout = 5000")
        clean = not read_only and path != MEMORY and closed_clean(conn)
        if integrity != "none" and not (integrity == "bounded" and clean):
            problems = _checked(conn, integrity)
            if problems != ["ok"]:
                raise corrupt(path, "; ".join(problems[:3]))
        if size_limit_bytes is not None:
            page = int(conn.execute("PRAGMA page_size").fetchone()[0])
            conn.execute(f"PRAGMA max_page_count = {max(1, size_limit_bytes // page)}")
        if read_only:
            version = schema_version(conn)
            if version == 0:
                raise JournalRefused(
                    path, "is empty or not a nicplug journal (it has no schema)",
                    "give the path of a journal that nicplug wrote",
                )
            if version > latest_version():
                raise JournalRefused(
                    path,
                    f"written by a newer nicplug (schema {version}, this one reads up to"
                    f" {latest_version()})",
                    "query it with the newer nicplug; it is left untouched",
                )
            if version != latest_version():
                raise JournalRefused(
                    path,
                    f"has schema {version}, this nicplug reads schema {latest_version()}",
                    "open it once with a writing nicplug of the same version",
                )
            return version
        version = migrate(conn, path=path)
        if clean:  # from now on this writer moves things: a crash must leave no mark
            conn.execute("DELETE FROM clean_close")
        return version
    except sqlite3.Error as error:
        raise translate(error, path) from error
