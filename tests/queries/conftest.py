from __future__ import annotations

from pathlib import Path

import pytest

from tests.queries.journal_worlds import filled_journal


@pytest.fixture(scope="session")
def standard_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The standard journal, written once per test session; tests only read it."""
    return filled_journal(tmp_path_factory.mktemp("queries") / "journal.db")
