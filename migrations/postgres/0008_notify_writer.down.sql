CREATE OR REPLACE FUNCTION kcp_kine_notify() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('kcp_kine', '');
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;
