"""A process to be killed: appends batches from many tasks and prints every ack.

`python -m tests.engine.crash_child JOURNAL SEED` prints `ready`, then one line
`<stream> <batch> <last version>` per acknowledged append, flushed, until killed.
Each batch carries its id and size in every event so a reader can check that it is
all there or not there at all.
"""

from __future__ import annotations

import asyncio
import random
import sys

from nicplug.engine.journal import Commit
from nicplug.engine.model import Cause, Key, NewEvent, StreamId, StreamView
from nicplug.engine.sqlite_journal import SQLiteJournal

TASKS = 16


async def appender(journal: SQLiteJournal, stream: StreamId, start: int, rng: random.Random,
                   seed: int) -> None:
    version = start
    number = 0
    while True:
        number += 1
        batch = f"{seed}-{stream}-{number}"
        size = rng.randint(1, 5)
        events = tuple(
            NewEvent(stream, "Step", {"batch": batch, "size": size, "pad": "p" * 100})
            for _ in range(size)
        )
        await journal.append(Commit(
            key=Key("crash"), cause=Cause("command", batch), wall_time=0.0,
            logical_time=float(number), events=events, expected={stream: version},
            views=(StreamView(stream, Key("crash"), f"v{version + size}", False, {}),),
        ))
        version += size
        sys.stdout.write(f"{stream} {batch} {version}\n")
        sys.stdout.flush()


async def main(path: str, seed: int) -> None:
    journal = await SQLiteJournal.open(path)
    versions = {v.view.stream: v.version for v in await journal.views(key=Key("crash"))}
    rng = random.Random(seed)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    streams = [StreamId(f"s{n}") for n in range(TASKS)]
    await asyncio.gather(*(
        appender(journal, s, versions.get(s, 0), random.Random(rng.random()), seed)
        for s in streams
    ))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
