-- Named tokens (corral.tokens, corral.store.sqltokens).
--
-- A bearer token with a name and a role (operator or viewer). Only its SHA-256 is
-- kept; every request presenting one looks it up by that hash (the unique index), so
-- a revoked (deleted) token is refused at once by every server process.
CREATE TABLE IF NOT EXISTS tokens (
    id           bigserial PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    role         text NOT NULL,
    hash         text NOT NULL UNIQUE,
    created_at   double precision NOT NULL,
    created_by   text NOT NULL,
    last_used_at double precision
);
