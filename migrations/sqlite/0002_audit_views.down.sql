DROP VIEW IF EXISTS kcp_cluster_footprint;
DROP VIEW IF EXISTS kcp_objects;
