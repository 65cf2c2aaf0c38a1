-- leasehold fencing for PostgreSQL: keep the state a leader protects in your
-- own database, and let the database refuse a stale leader's writes.
--
-- The story this closes: leader A (token 1) is paused (GC, SIGSTOP, a
-- partition); its lease expires; B is elected with token 2; A wakes and,
-- before it notices anything, finishes a write it had in flight. leasehold's
-- own CheckedWrite refuses it; a write to PostgreSQL must be refused the same
-- way. Three pieces, all below (README.md beside this file explains them):
--
-- 1. Every protected row carries the token of its last writer
--    (fence_token), and the fenced upsert only overwrites a row whose token
--    is not higher: missing row = insert; lower token = 0 rows = "you were
--    fenced".
-- 2. leasehold_take_over(job, token, tables...), called once on taking
--    leadership and BEFORE any work: raises the job's fence (one row in
--    leasehold_fence) and the fence_token of every row the job protects to
--    the new token. From then on a stale leader's update of an existing row
--    matches 0 rows, even where the new leader has not written yet.
-- 3. The job's fence row: every fenced write also requires its token to be
--    the job's current one, taking a share lock on the fence row. That
--    refuses the stale leader's inserts of rows that do not exist yet, and
--    orders each write strictly before or after a take-over.
--
-- 4. Proofs (optional; README.md, "Only issued tokens: proofs"): a grant's
--    proof (Lease.proof), verified in the application with
--    leasehold.proof.verify before the take-over and the write, so that a
--    token nobody issued (2^63 - 1, say) can neither raise the fence nor
--    write. The proof is kept beside the fence and each row (the `proof`
--    columns) so that an auditor can verify it again later; NULL where the
--    token came without one.
--
-- Tokens are leasehold's uint64 fencing tokens, stored as bigint (tokens
-- stay far below 2^63). Idempotent: safe to run more than once.

-- One row per job: the token that most recently took leadership of the job
-- in this database.
CREATE TABLE IF NOT EXISTS leasehold_fence (
    job      text        PRIMARY KEY,
    token    bigint      NOT NULL CHECK (token > 0),
    taken_at timestamptz NOT NULL DEFAULT now(),
    -- The proof the take-over came with (a JWS; docs/proofs.md), or NULL.
    proof    text
);
-- A database made before proofs: the column, added once.
ALTER TABLE leasehold_fence ADD COLUMN IF NOT EXISTS proof text;

-- leasehold_take_over(job, token, VARIADIC tables): call in its own
-- transaction when an Elector reports leadership with `token`, before doing
-- any work. Raises the job's fence to `token` and, in each table given, the
-- fence_token of every row of `job` (tables must have columns `job text`
-- and `fence_token bigint`). Returns true when the fence now holds `token`;
-- false when this database has already seen a higher token for the job (we
-- are stale: do not lead) -- then nothing changed.
--
-- The fence row is updated first, so a concurrent fenced write either
-- finished before (its share lock made us wait) or is refused after.
CREATE OR REPLACE FUNCTION leasehold_take_over(
    p_job text, p_token bigint, VARIADIC p_tables regclass[] DEFAULT '{}'
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    t regclass;
BEGIN
    IF p_token IS NULL OR p_token <= 0 THEN
        RAISE EXCEPTION 'leasehold_take_over: token must be positive, got %', p_token
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO leasehold_fence AS f (job, token) VALUES (p_job, p_token)
    ON CONFLICT (job) DO UPDATE SET token = EXCLUDED.token, taken_at = now(), proof = NULL
        WHERE f.token <= EXCLUDED.token;
    IF NOT FOUND THEN
        RETURN false;  -- a higher token took over here already
    END IF;
    FOREACH t IN ARRAY p_tables LOOP
        EXECUTE format('UPDATE %s SET fence_token = $2 WHERE job = $1 AND fence_token < $2', t)
            USING p_job, p_token;
    END LOOP;
    RETURN true;
END
$$;

-- leasehold_check(job, token): for multi-statement transactions. Call it
-- first in the transaction; it takes a share lock on the job's fence row
-- (held until commit, so a take-over waits for the transaction) and raises
-- SQLSTATE 'LH001' ("fenced") unless `token` is the job's current token.
CREATE OR REPLACE FUNCTION leasehold_check(p_job text, p_token bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    current bigint;
BEGIN
    SELECT token INTO current FROM leasehold_fence WHERE job = p_job FOR SHARE;
    IF current IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'fenced: job % is at token %, not %', p_job, coalesce(current, 0), p_token
            USING ERRCODE = 'LH001';
    END IF;
END
$$;

-- An example protected table: one row per (job, key), with the token of its
-- last writer. Any table with `job` and `fence_token` columns works the same.
CREATE TABLE IF NOT EXISTS bridge_status (
    job         text   NOT NULL,
    key         text   NOT NULL,
    value       text   NOT NULL,
    fence_token bigint NOT NULL CHECK (fence_token > 0),
    -- The proof of the last write's token, or NULL (written with a bare
    -- token). fence_token may be above the proof's token: a take-over
    -- raised it since.
    proof       text,
    PRIMARY KEY (job, key)
);
ALTER TABLE bridge_status ADD COLUMN IF NOT EXISTS proof text;

-- The fenced upsert, as a prepared statement ($1 job, $2 key, $3 value,
-- $4 token, $5 the token's proof or NULL). 1 row: written. 0 rows: fenced
-- -- the job's fence holds another token (a newer leader took over, or we
-- never called leasehold_take_over), or the row was written with a higher
-- token. The SELECT's FOR SHARE lock on the fence row orders the write
-- against any take-over: one waiting for the other, never interleaved.
--
--   INSERT INTO bridge_status AS t (job, key, value, fence_token, proof)
--   SELECT $1, $2, $3, $4, $5
--     FROM leasehold_fence AS f
--    WHERE f.job = $1 AND f.token = $4
--      FOR SHARE OF f
--   ON CONFLICT (job, key) DO UPDATE
--      SET value = EXCLUDED.value, fence_token = EXCLUDED.fence_token, proof = EXCLUDED.proof
--    WHERE t.fence_token <= EXCLUDED.fence_token;
--
-- The same, as a function returning whether the write landed (without a
-- proof: the row's proof is cleared).
CREATE OR REPLACE FUNCTION bridge_status_put(p_job text, p_key text, p_value text, p_token bigint)
RETURNS boolean LANGUAGE sql AS $$
    WITH written AS (
        INSERT INTO bridge_status AS t (job, key, value, fence_token)
        SELECT p_job, p_key, p_value, p_token
          FROM leasehold_fence AS f
         WHERE f.job = p_job AND f.token = p_token
           FOR SHARE OF f
        ON CONFLICT (job, key) DO UPDATE
           SET value = EXCLUDED.value, fence_token = EXCLUDED.fence_token, proof = NULL
         WHERE t.fence_token <= EXCLUDED.fence_token
        RETURNING 1
    )
    SELECT count(*) = 1 FROM written
$$;
