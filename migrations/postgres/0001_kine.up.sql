-- kine's table, created by us so that it can carry the generated cluster
-- column. Columns, types and index names are kine's own (v0.17): kine creates
-- them "IF NOT EXISTS" and so leaves ours alone. The unique index
-- kine_name_prev_revision_uindex is what makes concurrent updates safe, and
-- kine retries inserts on a conflict of the primary key named kine_pkey.
CREATE TABLE IF NOT EXISTS kine (
	id BIGSERIAL,
	name text COLLATE "C",
	created INTEGER,
	deleted INTEGER,
	create_revision BIGINT,
	prev_revision BIGINT,
	lease INTEGER,
	value bytea,
	old_value bytea,
	-- the logical cluster: the fifth '/'-field of the key
	-- (/registry/<group>/<resource>/<cluster>/...), '' for kine's own rows.
	cluster text COLLATE "C" GENERATED ALWAYS AS (split_part(name, '/', 5)) STORED,
	CONSTRAINT kine_pkey PRIMARY KEY (id)
);
CREATE INDEX IF NOT EXISTS kine_name_index ON kine (name);
CREATE INDEX IF NOT EXISTS kine_name_id_index ON kine (name, id);
CREATE INDEX IF NOT EXISTS kine_id_deleted_index ON kine (id, deleted);
CREATE INDEX IF NOT EXISTS kine_prev_revision_index ON kine (prev_revision);
CREATE UNIQUE INDEX IF NOT EXISTS kine_name_prev_revision_uindex ON kine (name, prev_revision);
CREATE INDEX IF NOT EXISTS kine_list_query_index ON kine (name, id DESC, deleted);
CREATE INDEX IF NOT EXISTS kine_cluster_name_id_index ON kine (cluster, name, id);
