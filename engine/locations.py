"""Where a journal lives: an SQLite file, or a PostgreSQL database named by a DSN.

Free of any driver, so that a command can tell the two apart (and name a DSN without
its password) in an install without the `postgres` extra.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def is_dsn(target: object) -> bool:
    """Whether a journal location names a PostgreSQL database rather than a file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def shown(dsn: str) -> str:
    """The DSN as logs and messages show it: without its password."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
