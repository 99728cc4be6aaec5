-- Live objects: the newest row of every key that is not a deletion.
-- Objects are stored as JSON, so the object column is jsonb.
CREATE OR REPLACE VIEW kcp_objects AS
SELECT
	k.cluster AS cluster,
	split_part(k.name, '/', 3) AS api_group,
	split_part(k.name, '/', 4) AS resource,
	COALESCE(convert_from(k.value, 'UTF8')::jsonb #>> '{metadata,namespace}', '') AS namespace,
	convert_from(k.value, 'UTF8')::jsonb #>> '{metadata,name}' AS name,
	k.id AS revision,
	k.name AS key,
	length(k.value) AS bytes,
	convert_from(k.value, 'UTF8')::jsonb AS object
FROM kine AS k
JOIN (SELECT DISTINCT ON (name) id FROM kine WHERE cluster <> '' ORDER BY name, id DESC) AS latest ON latest.id = k.id
WHERE k.deleted = 0;

-- What each logical cluster stores.
CREATE OR REPLACE VIEW kcp_cluster_footprint AS
SELECT cluster, COUNT(*) AS objects, SUM(bytes) AS bytes
FROM kcp_objects
GROUP BY cluster;
