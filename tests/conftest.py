"""Fixtures every test folder may use: the PostgreSQL server and its databases."""

from tests.postgres_support import postgres_dsn, postgres_server

__all__ = ["postgres_dsn", "postgres_server"]
