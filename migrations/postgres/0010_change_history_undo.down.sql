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
DROP INDEX IF EXISTS kcp_changes_cluster_revision_index;
ALTER TABLE kcp_changes DROP COLUMN IF EXISTS old_object;
ALTER TABLE kcp_changes DROP COLUMN IF EXISTS prev_revision;
DELETE FROM kcp_settings WHERE name IN ('change_history_since', 'change_history_pruned_to');
