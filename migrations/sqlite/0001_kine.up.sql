-- kine's table, created by us so that it can carry the generated cluster
-- column. Columns, types and index names are kine's own (v0.17): kine creates
-- them "IF NOT EXISTS" and so leaves ours alone. The unique index
-- kine_name_prev_revision_uindex is what makes concurrent updates safe.
CREATE TABLE IF NOT EXISTS kine (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	name TEXT,
	created INTEGER,
	deleted INTEGER,
	create_revision INTEGER,
	prev_revision INTEGER,
	lease INTEGER,
	value BLOB,
	old_value BLOB,
	-- the logical cluster: the fifth '/'-field of the key
	-- (/registry/<group>/<resource>/<cluster>/...), '' for kine's own rows.
	cluster TEXT GENERATED ALWAYS AS (CASE WHEN length(name) - length(replace(name, '/', '')) < 4 THEN '' ELSE CASE WHEN instr(substr(substr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), instr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), '/') + 1), instr(substr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), instr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), '/') + 1), '/') + 1), '/') > 0 THEN substr(substr(substr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), instr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), '/') + 1), instr(substr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), instr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), '/') + 1), '/') + 1), 1, instr(substr(substr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), instr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), '/') + 1), instr(substr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), instr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), '/') + 1), '/') + 1), '/') - 1) ELSE substr(substr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), instr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), '/') + 1), instr(substr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), instr(substr(substr(name, instr(name, '/') + 1), instr(substr(name, instr(name, '/') + 1), '/') + 1), '/') + 1), '/') + 1) END END) VIRTUAL
);
CREATE INDEX IF NOT EXISTS kine_name_index ON kine (name);
CREATE INDEX IF NOT EXISTS kine_name_id_index ON kine (name, id);
CREATE INDEX IF NOT EXISTS kine_id_deleted_index ON kine (id, deleted);
CREATE INDEX IF NOT EXISTS kine_prev_revision_index ON kine (prev_revision);
CREATE UNIQUE INDEX IF NOT EXISTS kine_name_prev_revision_uindex ON kine (name, prev_revision);
CREATE INDEX IF NOT EXISTS kine_id_compact_rev_key_with_prev_revision_index ON kine (id, name, prev_revision) WHERE name != 'compact_rev_key' AND prev_revision != 0;
CREATE INDEX IF NOT EXISTS kine_cluster_name_id_index ON kine (cluster, name, id);
