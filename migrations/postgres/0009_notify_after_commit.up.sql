-- Replicas notify each other from kcp, after a write, not from a trigger
-- inside it. Inserts into kine commit one at a time (0006, the commit-order
-- lock), and a NOTIFY in the inserting transaction did its work at commit,
-- while that lock was held: queueing the notification under PostgreSQL's
-- global notification lock and signalling every listener. Measured, 15-17%
-- of the creation rate on PostgreSQL (docs/performance.md). kcp now sends
-- NOTIFY kcp_kine, '<its writer name>' on its own connection once a write
-- returns, at most one every 2 ms for all the writes in between.
DROP TRIGGER IF EXISTS kcp_kine_notify ON kine;
DROP FUNCTION IF EXISTS kcp_kine_notify();
