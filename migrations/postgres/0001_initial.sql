-- The journal on PostgreSQL: the same tables as SQLite's schema 4 (events, the read
-- model of every stream, the outbox, durable timers, archives), plus the terms of
-- leadership that fence every write. Applied in one transaction; `nicplug_schema`
-- records each file applied.

CREATE TABLE events (
    position        BIGINT           PRIMARY KEY,   -- global commit order: assigned under
                                                    -- the writer's lock, gapless
    stream          TEXT             NOT NULL,
    key             TEXT             NOT NULL,      -- the aggregate key (a VM)
    version         INTEGER          NOT NULL,      -- 1, 2, 3 ... per stream, no gaps
    type            TEXT             NOT NULL,
    schema_version  INTEGER          NOT NULL,
    payload         JSONB            NOT NULL,
    cause_kind      TEXT             NOT NULL,      -- observation | timer | effect | command
    cause_ref       TEXT             NOT NULL,
    dedup_key       TEXT,                           -- a cause's first event per stream
    wall_time       DOUBLE PRECISION NOT NULL,
    logical_time    DOUBLE PRECISION NOT NULL,
    term            BIGINT           NOT NULL DEFAULT 0,  -- the term that wrote it (0: none)
    UNIQUE (stream, version)
);
CREATE UNIQUE INDEX events_dedup ON events (stream, dedup_key) WHERE dedup_key IS NOT NULL;
CREATE INDEX events_key ON events (key, position);

CREATE TABLE streams (
    stream           TEXT             PRIMARY KEY,
    key              TEXT             NOT NULL,
    version          INTEGER          NOT NULL,     -- the last event's version (0: none yet)
    state            TEXT,                          -- NULL until the machine wrote a view
    terminal         BOOLEAN          NOT NULL DEFAULT FALSE,
    snapshot         JSONB            NOT NULL DEFAULT '{}',
    updated_wall     DOUBLE PRECISION NOT NULL,
    updated_logical  DOUBLE PRECISION NOT NULL,
    snapshot_schema  INTEGER          NOT NULL DEFAULT 0,
    snapshot_through INTEGER          NOT NULL DEFAULT 0,
    archived         TEXT
);
CREATE INDEX streams_key ON streams (key);
CREATE INDEX streams_live ON streams (terminal, key);

CREATE TABLE effects (
    id              BIGSERIAL        PRIMARY KEY,
    stream          TEXT             NOT NULL,
    key             TEXT             NOT NULL,
    type            TEXT             NOT NULL,
    payload         JSONB            NOT NULL,
    idempotency_key TEXT             NOT NULL,
    status          TEXT             NOT NULL CHECK (status IN ('issued', 'succeeded', 'failed')),
    attempts        INTEGER          NOT NULL DEFAULT 0,
    next_attempt_at DOUBLE PRECISION,
    last_error      TEXT,
    created_wall    DOUBLE PRECISION NOT NULL,
    created_logical DOUBLE PRECISION NOT NULL,
    updated_wall    DOUBLE PRECISION NOT NULL,
    updated_logical DOUBLE PRECISION NOT NULL,
    schema_version  INTEGER          NOT NULL DEFAULT 1,
    claimed_term    BIGINT                          -- the last term that claimed it to send
);
CREATE UNIQUE INDEX effects_pending ON effects (idempotency_key) WHERE status = 'issued';
CREATE INDEX effects_stream ON effects (stream);
CREATE INDEX effects_status ON effects (status);

CREATE TABLE timers (
    stream          TEXT             NOT NULL,
    name            TEXT             NOT NULL,
    key             TEXT             NOT NULL,
    deadline        DOUBLE PRECISION NOT NULL,      -- logical seconds
    PRIMARY KEY (stream, name)
);
CREATE INDEX timers_deadline ON timers (deadline);

CREATE TABLE archives (
    id              BIGSERIAL        PRIMARY KEY,
    file            TEXT             NOT NULL,
    streams         INTEGER          NOT NULL,
    events          INTEGER          NOT NULL,
    cutoff_wall     DOUBLE PRECISION NOT NULL,
    written_wall    DOUBLE PRECISION NOT NULL
);

-- One row per term of leadership. A new leader takes max + 1 under the writers' lock;
-- from then on every write of an older term is refused in its own transaction.
CREATE TABLE terms (
    number          BIGINT           PRIMARY KEY,
    holder          TEXT             NOT NULL,
    started_wall    DOUBLE PRECISION NOT NULL
);
