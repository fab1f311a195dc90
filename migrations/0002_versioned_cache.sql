-- The events are the truth; the read model is a cache of their fold. Each snapshot
-- says which schema it is written in and through which version of its stream it is
-- folded, so recovery folds only the events after it and rebuilds one it cannot
-- trust. Outbox payloads carry their schema version like events do. Finished
-- operations past the retention window are archived: their events leave the journal
-- for an archive file, their read-model row stays as the summary (`archived` names
-- the file), and `archives` keeps one row per archive written.

ALTER TABLE streams ADD COLUMN snapshot_schema INTEGER NOT NULL DEFAULT 0;  -- 0: unversioned
ALTER TABLE streams ADD COLUMN snapshot_through INTEGER NOT NULL DEFAULT 0; -- stream version
ALTER TABLE streams ADD COLUMN archived TEXT;                              -- archive file

ALTER TABLE effects ADD COLUMN schema_version INTEGER NOT NULL DEFAULT 1;

CREATE TABLE archives (
    id              INTEGER PRIMARY KEY,
    file            TEXT    NOT NULL,
    streams         INTEGER NOT NULL,
    events          INTEGER NOT NULL,
    cutoff_wall     REAL    NOT NULL,             -- finished before this moment
    written_wall    REAL    NOT NULL
);
