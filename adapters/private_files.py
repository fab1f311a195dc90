"""Files that hold whole cluster objects, written for their owner alone (mode 0600).

Tapes and the demo's logs carry every watched object as it was (annotations, specs,
whatever a user put in them), like the journal; they are created 0600 whatever the
umask, and a file written over is made 0600 too. Nothing here decides what is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

PRIVATE = 0o600


def open_private(path: Path) -> IO[bytes]:
    """`path` opened for writing from its start, readable and writable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE)
    try:
        os.fchmod(fd, PRIVATE)  # it existed with another mode, or the umask was odd
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
