-- Live objects: the newest row of every key that is not a deletion.
-- Objects are stored as JSON, so the object column can be read with json_extract.
CREATE VIEW IF NOT EXISTS kcp_objects AS
SELECT
	k.cluster AS cluster,
	CASE WHEN length(k.name) - length(replace(k.name, '/', '')) < 2 THEN '' ELSE CASE WHEN instr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), '/') > 0 THEN substr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), 1, instr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), '/') - 1) ELSE substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1) END END AS api_group,
	CASE WHEN length(k.name) - length(replace(k.name, '/', '')) < 3 THEN '' ELSE CASE WHEN instr(substr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), instr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), '/') + 1), '/') > 0 THEN substr(substr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), instr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), '/') + 1), 1, instr(substr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), instr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), '/') + 1), '/') - 1) ELSE substr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), instr(substr(substr(k.name, instr(k.name, '/') + 1), instr(substr(k.name, instr(k.name, '/') + 1), '/') + 1), '/') + 1) END END AS resource,
	COALESCE(json_extract(k.value, '$.metadata.namespace'), '') AS namespace,
	json_extract(k.value, '$.metadata.name') AS name,
	k.id AS revision,
	k.name AS key,
	length(k.value) AS bytes,
	CAST(k.value AS TEXT) AS object
FROM kine AS k
JOIN (SELECT MAX(id) AS id FROM kine WHERE cluster <> '' GROUP BY name) AS latest ON latest.id = k.id
WHERE k.deleted = 0;

-- What each logical cluster stores.
CREATE VIEW IF NOT EXISTS kcp_cluster_footprint AS
SELECT cluster, COUNT(*) AS objects, SUM(bytes) AS bytes
FROM kcp_objects
GROUP BY cluster;
