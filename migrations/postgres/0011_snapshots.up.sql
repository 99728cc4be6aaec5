-- Snapshots of one workspace at one revision (issue 54): taken by kcp for
-- a WorkspaceSnapshot (in the workspace's parent, on a schedule), or loaded
-- by `kcp restore --from FILE`; read by WorkspaceRestores in that parent.
-- The rows are copies of kine's rows (key and value as stored); kcp never
-- writes kine's table from them, only through kine when it restores.
CREATE TABLE IF NOT EXISTS kcp_snapshots (
	id BIGSERIAL PRIMARY KEY,
	parent text COLLATE "C" NOT NULL,
	name text COLLATE "C" NOT NULL,
	cluster text COLLATE "C" NOT NULL,
	revision BIGINT NOT NULL,
	taken_at timestamptz NOT NULL DEFAULT now(),
	objects BIGINT NOT NULL DEFAULT 0,
	bytes BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS kcp_snapshots_parent_name_index ON kcp_snapshots (parent, name, id);
CREATE TABLE IF NOT EXISTS kcp_snapshot_rows (
	snapshot_id BIGINT NOT NULL,
	key text COLLATE "C" NOT NULL,
	value bytea,
	PRIMARY KEY (snapshot_id, key)
);
