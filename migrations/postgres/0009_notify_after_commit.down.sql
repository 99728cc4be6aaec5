CREATE OR REPLACE FUNCTION kcp_kine_notify() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('kcp_kine', current_setting('application_name'));
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS kcp_kine_notify ON kine;
CREATE TRIGGER kcp_kine_notify AFTER INSERT ON kine
	FOR EACH STATEMENT EXECUTE FUNCTION kcp_kine_notify();
