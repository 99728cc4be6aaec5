DROP TABLE IF EXISTS kcp_snapshot_rows;
DROP TABLE IF EXISTS kcp_snapshots;
