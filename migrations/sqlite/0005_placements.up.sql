-- Where workloads run (issue 16): one row per placed namespace with its
-- SyncTargets and mode, and one row per Deployment and SyncTarget with that
-- target's share of the replicas and how many of them are available there.
CREATE VIEW IF NOT EXISTS kcp_placements AS
SELECT
	n.cluster,
	n.name AS namespace,
	json_extract(n.object, '$.metadata.annotations."workload.kcp.io/sync-target"') AS targets,
	COALESCE(json_extract(json_extract(n.object, '$.metadata.annotations."workload.kcp.io/placement"'), '$.mode'), 'Duplicate') AS mode
FROM kcp_objects AS n
WHERE n.api_group = 'core' AND n.resource = 'namespaces'
	AND json_extract(n.object, '$.metadata.annotations."workload.kcp.io/sync-target"') IS NOT NULL;

-- A Deployment on several targets: each target's syncer reports its share
-- in the annotation workload.kcp.io/status-<target key>. On one target: the
-- whole Deployment, with its own status.
CREATE VIEW IF NOT EXISTS kcp_workload_shares AS
WITH placed AS (
	SELECT n.cluster, n.name AS namespace,
		json_extract(json_extract(n.object, '$.metadata.annotations."workload.kcp.io/placement"'), '$.targets') AS targets
	FROM kcp_objects AS n
	WHERE n.api_group = 'core' AND n.resource = 'namespaces'
		AND json_extract(n.object, '$.metadata.annotations."workload.kcp.io/placement"') IS NOT NULL
), deployments AS (
	SELECT d.cluster, d.namespace, d.name, d.object
	FROM kcp_objects AS d
	WHERE d.api_group = 'apps' AND d.resource = 'deployments'
)
SELECT d.cluster, d.namespace, d.name AS deployment, json_extract(t.value, '$.name') AS target,
	CASE WHEN (SELECT count(*) FROM json_each(p.targets)) = 1
		THEN COALESCE(json_extract(d.object, '$.spec.replicas'), 1)
		ELSE json_extract(json_extract(d.object, '$.metadata.annotations."workload.kcp.io/status-' || t.key || '"'), '$.share') END AS replicas,
	CASE WHEN (SELECT count(*) FROM json_each(p.targets)) = 1
		THEN COALESCE(json_extract(d.object, '$.status.availableReplicas'), 0)
		ELSE COALESCE(json_extract(json_extract(d.object, '$.metadata.annotations."workload.kcp.io/status-' || t.key || '"'), '$.status.availableReplicas'), 0) END AS available
FROM deployments AS d
JOIN placed AS p ON p.cluster = d.cluster AND p.namespace = d.namespace
JOIN json_each(p.targets) AS t;
