-- Snapshots of one workspace at one revision (issue 54): taken by kcp for
-- a WorkspaceSnapshot (in the workspace's parent, on a schedule), or loaded
-- by `kcp restore --from FILE`; read by WorkspaceRestores in that parent.
-- The rows are copies of kine's rows (key and value as stored); kcp never
-- writes kine's table from them, only through kine when it restores.
CREATE TABLE IF NOT EXISTS kcp_snapshots (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	parent TEXT NOT NULL,
	name TEXT NOT NULL,
	cluster TEXT NOT NULL,
	revision INTEGER NOT NULL,
	taken_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
	objects INTEGER NOT NULL DEFAULT 0,
	bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS kcp_snapshots_parent_name_index ON kcp_snapshots (parent, name, id);
CREATE TABLE IF NOT EXISTS kcp_snapshot_rows (
	snapshot_id INTEGER NOT NULL,
	key TEXT NOT NULL,
	value BLOB,
	PRIMARY KEY (snapshot_id, key)
);
