"""The engine's own exceptions: what the journal refuses and how an effect failed.

SQLite and HTTP errors are translated into these at the edge (`raise ... from e`), so
the runtime decides what to do from the type alone. This module must never import a
driver or a client library: it is pure vocabulary.
"""

from __future__ import annotations


class JournalError(Exception):
    """Anything the journal could not do. Nothing acknowledged is lost by it."""


class JournalConflict(JournalError):
    """An append expected `stream` at `expected` but the journal holds `actual`.

    Optimistic concurrency: the caller reloads the stream and decides again. A
    conflicting unit fails alone; other units committed with it are unaffected.
    """

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, the append expected {expected}"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


class JournalRefused(JournalError):
    """The journal cannot be used as it is: newer schema, corruption, unwritable path,
    full disk. The message names the path and what to do; nothing is recreated."""

    def __init__(self, path: str, problem: str, remedy: str) -> None:
        super().__init__(f"journal {path}: {problem}; {remedy}")
        self.path = path
        self.problem = problem
        self.remedy = remedy


class JournalClosed(JournalError):
    """An append or read reached a journal that was closed."""


class TemporaryError(Exception):
    """An effect failed but may succeed later; retry after `delay` seconds when given
    (for example a 429's `Retry-After`), else after the runtime's backoff."""

    def __init__(self, message: str, *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class RetryAfterObservation(TemporaryError):
    """The world moved under the effect (an HTTP 409, a failed `test` op): retrying the
    same request is pointless. The runtime gives the effect up and decides again with
    the key's next observed world, which carries the fresh state."""


class OwnWriteUnseen(RetryAfterObservation):
    """Refused as `RetryAfterObservation` because a write of this controller landed that
    the observations do not show yet: a decision taken before they show it asks the same
    request again, refused the same way. Its outcome says so (`result["unseen"]`), so
    that the decider asks again at its blind re-issues' spacing, or at once for anything
    a world showing the write needs instead."""


class Deposed(Exception):
    """The term of leadership that decided an effect has ended: the effect must not be
    sent. Its outcome is not recorded; the outbox keeps it for the next leader, which
    re-issues it after recovering the key."""


class Superseded(JournalError, Deposed):
    """A later term of leadership has begun in the journal: this writer's term is over
    and nothing it asks is written or claimed, in the very transaction that found out.

    A journal error (the runtime keeps the refused decision for later, never loses it)
    and `Deposed` (an effect whose claim is refused is not sent, nor its outcome
    recorded: the newer term re-issues it)."""

    def __init__(self, term: int, latest: int) -> None:
        super().__init__(f"term {term} is over: term {latest} has begun; nothing is written")
        self.term = term
        self.latest = latest


class PermanentError(Exception):
    """An effect failed and retrying cannot help (the request is rejected as invalid)."""


class UnknownSchema(JournalError):
    """A persisted payload this code cannot read: a type it does not know, or a schema
    version newer than it writes. Never guessed at: the reader stops and says so."""


class EffectUndecodable(RetryAfterObservation):
    """An outbox payload that no upcaster can make readable (written by another
    version). It is dropped, never sent and never failed as rejected: the machine
    decides the key again from the world, which issues the effect it needs now."""
