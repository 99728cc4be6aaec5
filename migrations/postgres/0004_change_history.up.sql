-- Opt-in change history that outlives kine's compaction: one row per write
-- of an object (create, update, delete) with the object as stored, fed by a
-- trigger on kine's table. It is recorded only while kcp_settings has
-- change_history = 'on' (kcp start --change-history); kcp deletes rows older
-- than the retention. The trigger only reads kine's row; it never changes it.
CREATE TABLE IF NOT EXISTS kcp_settings (
	name text PRIMARY KEY,
	value text NOT NULL
);
CREATE TABLE IF NOT EXISTS kcp_changes (
	id BIGSERIAL PRIMARY KEY,
	revision BIGINT NOT NULL,
	cluster text COLLATE "C" NOT NULL,
	key text COLLATE "C" NOT NULL,
	operation text NOT NULL,
	changed_at timestamptz NOT NULL DEFAULT now(),
	object bytea
);
CREATE INDEX IF NOT EXISTS kcp_changes_cluster_time_index ON kcp_changes (cluster, changed_at);
CREATE INDEX IF NOT EXISTS kcp_changes_time_index ON kcp_changes (changed_at);

CREATE OR REPLACE FUNCTION kcp_kine_change_history() RETURNS trigger AS $$
BEGIN
	IF NEW.cluster <> '' AND EXISTS (SELECT 1 FROM kcp_settings WHERE name = 'change_history' AND value = 'on') THEN
		INSERT INTO kcp_changes (revision, cluster, key, operation, object)
		VALUES (NEW.id, NEW.cluster, NEW.name,
			CASE WHEN NEW.deleted <> 0 THEN 'delete' WHEN NEW.created <> 0 THEN 'create' ELSE 'update' END,
			COALESCE(NEW.value, NEW.old_value));
	END IF;
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS kcp_kine_change_history ON kine;
CREATE TRIGGER kcp_kine_change_history AFTER INSERT ON kine
	FOR EACH ROW EXECUTE FUNCTION kcp_kine_change_history();
