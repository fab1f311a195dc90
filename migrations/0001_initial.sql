-- The journal: events (the truth), the read model of every stream, the outbox of
-- effects and the durable timers. Applied in one transaction at open.

CREATE TABLE events (
    position        INTEGER PRIMARY KEY,          -- global order, for projections and tailing
    stream          TEXT    NOT NULL,
    key             TEXT    NOT NULL,             -- the aggregate key (a VM)
    version         INTEGER NOT NULL,             -- 1, 2, 3 ... per stream, no gaps
    type            TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL,
    payload         TEXT    NOT NULL,             -- JSON
    cause_kind      TEXT    NOT NULL,             -- observation | timer | effect | command
    cause_ref       TEXT    NOT NULL,
    dedup_key       TEXT,                         -- set on a cause's first event per stream
    wall_time       REAL    NOT NULL,
    logical_time    REAL    NOT NULL,
    UNIQUE (stream, version)
);
CREATE UNIQUE INDEX events_dedup ON events (stream, dedup_key) WHERE dedup_key IS NOT NULL;

CREATE TABLE streams (
    stream          TEXT    PRIMARY KEY,
    key             TEXT    NOT NULL,
    version         INTEGER NOT NULL,             -- the last event's version (0: none yet)
    state           TEXT,                         -- NULL until the machine wrote a view
    terminal        INTEGER NOT NULL DEFAULT 0,
    snapshot        TEXT    NOT NULL DEFAULT '{}', -- JSON
    updated_wall    REAL    NOT NULL,
    updated_logical REAL    NOT NULL
) WITHOUT ROWID;
CREATE INDEX streams_key ON streams (key);
CREATE INDEX streams_live ON streams (terminal, key);

CREATE TABLE effects (
    id              INTEGER PRIMARY KEY,
    stream          TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,             -- JSON
    idempotency_key TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('issued', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL,
    last_error      TEXT,
    created_wall    REAL    NOT NULL,
    created_logical REAL    NOT NULL,
    updated_wall    REAL    NOT NULL,
    updated_logical REAL    NOT NULL
);
CREATE UNIQUE INDEX effects_pending ON effects (idempotency_key) WHERE status = 'issued';
CREATE INDEX effects_stream ON effects (stream);
CREATE INDEX effects_status ON effects (status);

CREATE TABLE timers (
    stream          TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    deadline        REAL    NOT NULL,             -- logical seconds
    PRIMARY KEY (stream, name)
) WITHOUT ROWID;
CREATE INDEX timers_deadline ON timers (deadline);
