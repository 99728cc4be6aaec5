DROP TRIGGER IF EXISTS kcp_kine_commit_order ON kine;
DROP FUNCTION IF EXISTS kcp_kine_commit_order();
ALTER TABLE kine ALTER COLUMN id SET DEFAULT nextval(pg_get_serial_sequence('kine', 'id')::regclass);
