-- The change history becomes an undo log (issue 54, restore a workspace to
-- a point in time): each row also keeps the object as it was just before
-- the change (kine's old_value) and the revision it had then (kine's
-- prev_revision). The state of a key at revision R is then the old object
-- of its first change after R, so a restore needs only the history after R.
-- kcp_settings 'change_history_since' is the revision from which every
-- write is recorded (kcp sets it when recording is switched on; rows from
-- before this migration have no old object, so coverage starts now).
ALTER TABLE kcp_changes ADD COLUMN IF NOT EXISTS prev_revision BIGINT;
ALTER TABLE kcp_changes ADD COLUMN IF NOT EXISTS old_object bytea;
CREATE INDEX IF NOT EXISTS kcp_changes_cluster_revision_index ON kcp_changes (cluster, revision);

CREATE OR REPLACE FUNCTION kcp_kine_change_history() RETURNS trigger AS $$
BEGIN
	IF NEW.cluster <> '' AND EXISTS (SELECT 1 FROM kcp_settings WHERE name = 'change_history' AND value = 'on') THEN
		INSERT INTO kcp_changes (revision, cluster, key, operation, object, prev_revision, old_object)
		VALUES (NEW.id, NEW.cluster, NEW.name,
			CASE WHEN NEW.deleted <> 0 THEN 'delete' WHEN NEW.created <> 0 THEN 'create' ELSE 'update' END,
			COALESCE(NEW.value, NEW.old_value), NEW.prev_revision,
			CASE WHEN NEW.created <> 0 THEN NULL ELSE NEW.old_value END);
	END IF;
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;

INSERT INTO kcp_settings (name, value)
SELECT 'change_history_since', COALESCE((SELECT MAX(id) FROM kine), 0)::text
WHERE EXISTS (SELECT 1 FROM kcp_settings WHERE name = 'change_history' AND value = 'on')
ON CONFLICT (name) DO UPDATE SET value = excluded.value;
