DROP VIEW IF EXISTS kcp_workload_shares;
DROP VIEW IF EXISTS kcp_placements;
