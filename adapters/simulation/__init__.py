"""The deterministic simulation harness (`nicplug dst`): seeded fault schedules played
against the real controller and the simulated cluster on one virtual clock, judged by
invariants, shrunk to a replayable tape. It composes the core with the simulator, so it
is an edge: the core never imports it."""
