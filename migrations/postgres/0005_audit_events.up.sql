-- Who did what: Kubernetes audit events (upstream audit policy decides which)
-- written in batches by kcp start --audit-to-datastore, pruned by age.
CREATE TABLE IF NOT EXISTS audit_events (
	id BIGSERIAL PRIMARY KEY,
	at timestamptz NOT NULL,
	audit_id text NOT NULL,
	stage text NOT NULL,
	cluster text COLLATE "C" NOT NULL,
	username text NOT NULL,
	groups text NOT NULL,
	verb text NOT NULL,
	api_group text NOT NULL,
	resource text NOT NULL,
	subresource text NOT NULL,
	namespace text NOT NULL,
	name text NOT NULL,
	code integer NOT NULL,
	request_uri text NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_cluster_at_index ON audit_events (cluster, at);
CREATE INDEX IF NOT EXISTS audit_events_at_index ON audit_events (at);
