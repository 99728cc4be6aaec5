-- Wake other replicas' kine pollers as soon as a row is written: each kcp
-- replica LISTENs on kcp_kine and, when notified, makes kine look for new
-- revisions at once instead of at its next poll (every second). The trigger
-- only notifies; it never changes rows. Statement-level, empty payload: a
-- burst of inserts costs one notification per statement, and NOTIFY folds
-- duplicates within a transaction.
CREATE OR REPLACE FUNCTION kcp_kine_notify() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('kcp_kine', '');
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS kcp_kine_notify ON kine;
CREATE TRIGGER kcp_kine_notify AFTER INSERT ON kine
	FOR EACH STATEMENT EXECUTE FUNCTION kcp_kine_notify();
