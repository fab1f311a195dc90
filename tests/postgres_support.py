"""A real PostgreSQL server for the tests: one temporary cluster per run, a fresh
database per test.

`postgres_server` (session) starts it on first use; when it cannot be started the
fixture FAILS with the reason — these tests are never skipped silently. `postgres_dsn`
creates a new database from a template the journal's own migrations prepared (a copy
of a template is much faster than migrating each time) and drops it after the test.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.simulator.postgres_server import LocalPostgres, ServerUnavailable

TEMPLATE = "nicplug_template"
_numbers = itertools.count(1)
_template_ready = False


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    try:
        server = LocalPostgres()
        server.start()
    except ServerUnavailable as error:
        pytest.fail(f"no PostgreSQL server could be started for the tests: {error}",
                    pytrace=False)
    try:
        yield server
    finally:
        server.stop()


async def fresh_database(server: LocalPostgres) -> str:
    """A new, migrated, empty database on `server`; its DSN."""
    global _template_ready
    admin = await asyncpg.connect(server.dsn())
    try:
        if not _template_ready:
            await admin.execute(f"CREATE DATABASE {TEMPLATE}")
            journal = await PostgresJournal.open(server.dsn(TEMPLATE))
            await journal.close()
            _template_ready = True
        name = f"test_{next(_numbers)}"
        await admin.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    finally:
        await admin.close()
    return server.dsn(name)


@pytest.fixture
async def postgres_dsn(postgres_server: LocalPostgres) -> AsyncIterator[str]:
    dsn = await fresh_database(postgres_server)
    yield dsn
    admin = await asyncpg.connect(postgres_server.dsn())
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {dsn.rsplit('/', 1)[1]} WITH (FORCE)")
    finally:
        await admin.close()
