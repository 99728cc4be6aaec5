-- Where workloads run (issue 16): one row per placed namespace with its
-- SyncTargets and mode, and one row per Deployment and SyncTarget with that
-- target's share of the replicas and how many of them are available there.
CREATE OR REPLACE VIEW kcp_placements AS
SELECT
	n.cluster,
	n.name AS namespace,
	n.object -> 'metadata' -> 'annotations' ->> 'workload.kcp.io/sync-target' AS targets,
	COALESCE((n.object -> 'metadata' -> 'annotations' ->> 'workload.kcp.io/placement')::jsonb ->> 'mode', 'Duplicate') AS mode
FROM kcp_objects AS n
WHERE n.api_group = 'core' AND n.resource = 'namespaces'
	AND n.object -> 'metadata' -> 'annotations' ? 'workload.kcp.io/sync-target';

-- A Deployment on several targets: each target's syncer reports its share
-- in the annotation workload.kcp.io/status-<target key>. On one target: the
-- whole Deployment, with its own status.
CREATE OR REPLACE VIEW kcp_workload_shares AS
WITH placed AS (
	SELECT n.cluster, n.name AS namespace,
		(n.object -> 'metadata' -> 'annotations' ->> 'workload.kcp.io/placement')::jsonb -> 'targets' AS targets
	FROM kcp_objects AS n
	WHERE n.api_group = 'core' AND n.resource = 'namespaces'
		AND n.object -> 'metadata' -> 'annotations' ? 'workload.kcp.io/placement'
), deployments AS (
	SELECT d.cluster, d.namespace, d.name, d.object
	FROM kcp_objects AS d
	WHERE d.api_group = 'apps' AND d.resource = 'deployments'
)
SELECT d.cluster, d.namespace, d.name AS deployment, t.value ->> 'name' AS target,
	CASE WHEN (SELECT count(*) FROM jsonb_object_keys(p.targets)) = 1
		THEN COALESCE((d.object -> 'spec' ->> 'replicas')::int, 1)
		ELSE ((d.object -> 'metadata' -> 'annotations' ->> ('workload.kcp.io/status-' || t.key))::jsonb ->> 'share')::int END AS replicas,
	CASE WHEN (SELECT count(*) FROM jsonb_object_keys(p.targets)) = 1
		THEN COALESCE((d.object -> 'status' ->> 'availableReplicas')::int, 0)
		ELSE COALESCE(((d.object -> 'metadata' -> 'annotations' ->> ('workload.kcp.io/status-' || t.key))::jsonb -> 'status' ->> 'availableReplicas')::int, 0) END AS available
FROM deployments AS d
JOIN placed AS p ON p.cluster = d.cluster AND p.namespace = d.namespace
CROSS JOIN LATERAL jsonb_each(p.targets) AS t;
