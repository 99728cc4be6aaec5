-- Superseded by 0009, which drops this trigger: kcp now sends the
-- notification itself after a write. Kept as it ran.
-- The notification names the session that wrote: its application_name.
-- kcp names each replica's kine connections uniquely (the URL's
-- application_name, or kcp, with a random suffix: kcp-5c1e0a9b3f7d), and a
-- replica ignores notifications of its own writes: its kine learns of them
-- as it writes them, and waking it for them cost one query per write
-- (about 3.5 per new workspace). Any other writer (an older replica, psql)
-- sends another name, which every replica treats as another's write.
CREATE OR REPLACE FUNCTION kcp_kine_notify() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('kcp_kine', current_setting('application_name'));
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;
