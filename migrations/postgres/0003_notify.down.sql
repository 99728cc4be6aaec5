DROP TRIGGER IF EXISTS kcp_kine_notify ON kine;
DROP FUNCTION IF EXISTS kcp_kine_notify();
