-- corral schema, version 14 (SQLite): named tokens (corral.tokens, corral.store.sqltokens).
--
-- A bearer token with a name and a role (operator or viewer). Only its SHA-256 is
-- kept; every request presenting one looks it up by that hash (the unique index), so
-- a revoked (deleted) token is refused at once. (IF NOT EXISTS: a store rewound to an
-- older version by hand re-runs the migrations after it.)
CREATE TABLE IF NOT EXISTS tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT NOT NULL UNIQUE,
    role         TEXT NOT NULL,
    hash         TEXT NOT NULL UNIQUE,
    created_at   REAL NOT NULL,
    created_by   TEXT NOT NULL,
    last_used_at REAL
);
