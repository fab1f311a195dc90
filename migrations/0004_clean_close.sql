-- A writer that closes the journal last, after the whole file passed its check in that
-- term, leaves one row here; the next writer to open it finds that nothing moved since
-- and skips the check at open (the whole file is checked again after start). Every
-- writer deletes the row when it opens, so a writer that then crashes leaves none,
-- and the next open checks the tables recovery reads whole.
CREATE TABLE clean_close (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    closed_wall REAL    NOT NULL
);
