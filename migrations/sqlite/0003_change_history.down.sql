DROP TRIGGER IF EXISTS kcp_kine_change_history;
DROP TABLE IF EXISTS kcp_changes;
DROP TABLE IF EXISTS kcp_settings;
