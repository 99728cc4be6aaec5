-- Who did what: Kubernetes audit events (upstream audit policy decides which)
-- written in batches by kcp start --audit-to-datastore, pruned by age.
CREATE TABLE IF NOT EXISTS audit_events (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	at TEXT NOT NULL,
	audit_id TEXT NOT NULL,
	stage TEXT NOT NULL,
	cluster TEXT NOT NULL,
	username TEXT NOT NULL,
	groups TEXT NOT NULL,
	verb TEXT NOT NULL,
	api_group TEXT NOT NULL,
	resource TEXT NOT NULL,
	subresource TEXT NOT NULL,
	namespace TEXT NOT NULL,
	name TEXT NOT NULL,
	code INTEGER NOT NULL,
	request_uri TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_cluster_at_index ON audit_events (cluster, at);
CREATE INDEX IF NOT EXISTS audit_events_at_index ON audit_events (at);
