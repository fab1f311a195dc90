"""Connecting to a PostgreSQL journal, bringing its schema up to date, or refusing to.

The schema files live in `migrations/postgres/` beside SQLite's, numbered the same way;
`nicplug_schema` records each one applied, and each is applied in its own transaction
under an advisory lock, so two replicas starting at once migrate once. A database
written by a newer nicplug is refused, never downgraded. The driver's errors become the
engine's own here (`translate`); a DSN is never shown with its password.
"""

from __future__ import annotations

import time

import asyncpg

from nicplug.engine.errors import JournalError, JournalRefused
from nicplug.engine.locations import is_dsn, shown
from nicplug.engine.schema import Migration, numbered

__all__ = ["is_dsn", "shown"]  # re-exported: older imports name them here


MIGRATION_LOCK = 0x6E6963_0001
"""Advisory lock taken while migrating (a transaction-level lock: released by COMMIT)."""
WRITER_LOCK = 0x6E6963_0002
"""Advisory lock every write transaction takes first: writes commit one after another,
so positions (assigned under it) are in commit order, and a new term waits for the
write in progress and refuses every later one of the older term."""

_SCHEMA_TABLE = (
    "CREATE TABLE IF NOT EXISTS nicplug_schema (version INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL, applied_wall DOUBLE PRECISION NOT NULL)"
)


def migrations() -> list[Migration]:
    return numbered("postgres")


def latest_version() -> int:
    return len(migrations())


async def schema_version(conn: asyncpg.Connection) -> int:
    present = await conn.fetchval("SELECT to_regclass('nicplug_schema') IS NOT NULL")
    if not present:
        return 0
    return int(await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM nicplug_schema"))


async def migrate(conn: asyncpg.Connection, *, name: str) -> int:
    """Bring the schema up to date; return the version it is at now."""
    known = migrations()
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute(_SCHEMA_TABLE)
    current = await schema_version(conn)
    if current > len(known):
        raise JournalRefused(
            name,
            f"written by a newer nicplug (schema {current}, this one knows up to {len(known)})",
            "run the newer nicplug; the database is left untouched",
        )
    for migration in known[current:]:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            if await schema_version(conn) >= migration.number:
                continue  # another replica applied it meanwhile
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO nicplug_schema (version, name, applied_wall) VALUES ($1, $2, $3)",
                migration.number, migration.name, time.time(),
            )
    return len(known)


async def check_readable(conn: asyncpg.Connection, *, name: str) -> int:
    """For a reader: the schema must be there and exactly this code's."""
    version = await schema_version(conn)
    if version == 0:
        raise JournalRefused(name, "holds no nicplug journal (no schema)",
                             "give the DSN of a database a writing nicplug opened")
    if version != latest_version():
        raise JournalRefused(
            name, f"has schema {version}, this nicplug reads schema {latest_version()}",
            "query it with the nicplug of the same version")
    return version


_CONSTRAINTS = {
    "23514": "CHECK",
    "23505": "UNIQUE",
    "23502": "NOT NULL",
    "23503": "FOREIGN KEY",
}


def translate(error: BaseException, name: str) -> JournalError:
    """The driver's error as the journal's own: what cannot work as it is (refused), a
    unit that breaks a constraint (rejected alone), or the database out of reach (a
    journal error the runtime retries)."""
    state = getattr(error, "sqlstate", None)
    if isinstance(error, asyncpg.IntegrityConstraintViolationError):
        kind = _CONSTRAINTS.get(str(state), "integrity")
        return JournalError(f"rejected: {kind} constraint failed ({error})")
    if state == "53100":
        return JournalRefused(name, "the database's disk is full; the unit was not committed",
                              "free space; every acknowledged event is kept")
    if isinstance(error, asyncpg.InvalidCatalogNameError):
        return JournalRefused(name, "no such database", "create it, or give the right DSN")
    if isinstance(error, asyncpg.InvalidAuthorizationSpecificationError
                  | asyncpg.InvalidPasswordError):
        return JournalRefused(name, f"refused the login ({error})",
                              "check the user and password in the DSN (the Secret)")
    if isinstance(error, asyncpg.InsufficientPrivilegeError):
        return JournalRefused(name, f"refused a statement ({error})",
                              "grant the user the rights on nicplug's tables")
    if isinstance(error, asyncpg.ReadOnlySQLTransactionError):
        return JournalRefused(name, "is read-only here (a standby server?)",
                              "connect to the primary (the DSN of the read-write service)")
    if isinstance(error, OSError | asyncpg.InterfaceError | asyncpg.PostgresConnectionError):
        return JournalError(f"journal {name}: the database cannot be reached ({error})")
    return JournalError(f"journal {name}: {error}")
