-- Revisions commit in the order they are numbered. kine's revision is the row
-- id, which PostgreSQL used to draw from the sequence when an INSERT began;
-- concurrent inserts (several writers, several replicas) then committed out
-- of id order. A list took MAX(id) as its resourceVersion while a lower id was
-- still uncommitted, and a watch started from it never delivered that lower
-- id: watches missed events (issue 13). Here every insert takes one
-- transaction-scoped advisory lock and only then draws its id, so an id is
-- never visible while a lower one can still commit: every id below a visible
-- one is committed or gone for good (a rolled-back insert, which kine's
-- poller fills after a second, as before). The id column has no default any
-- more; rows kine writes with an explicit id (its gap fills) keep it.
-- Cost: inserts into kine commit one at a time across all replicas, which is
-- what etcd's single leader does too (docs/operations.md).
CREATE OR REPLACE FUNCTION kcp_kine_commit_order() RETURNS trigger AS $$
BEGIN
	PERFORM pg_advisory_xact_lock(7263854219001);
	IF NEW.id IS NULL THEN
		NEW.id := nextval(pg_get_serial_sequence('kine', 'id')::regclass);
	END IF;
	RETURN NEW;
END;
$$ LANGUAGE plpgsql;

ALTER TABLE kine ALTER COLUMN id DROP DEFAULT;
DROP TRIGGER IF EXISTS kcp_kine_commit_order ON kine;
CREATE TRIGGER kcp_kine_commit_order BEFORE INSERT ON kine
	FOR EACH ROW EXECUTE FUNCTION kcp_kine_commit_order();
