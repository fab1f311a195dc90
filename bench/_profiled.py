"""Run the `nicplug` CLI under cProfile counting CPU time, not wall time.

`python -m bench._profiled OUT ARGS...` runs `nicplug ARGS...` and writes the profile
to OUT when it exits. `python -m cProfile` times with the wall clock, so on a loaded
machine a write to a socket shows the time the process waited for a CPU;
`time.process_time` counts only what the process itself spent (of every thread,
though only the main thread's calls are recorded).
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main(argv: list[str]) -> None:
    out, args = argv[0], argv[1:]
    sys.argv = ["nicplug", *args]
    profile = cProfile.Profile(time.process_time)
    try:
        profile.runcall(runpy.run_module, "nicplug.adapters.cli", run_name="__main__")
    except SystemExit:
        pass
    finally:
        profile.dump_stats(out)


if __name__ == "__main__":
    main(sys.argv[1:])
