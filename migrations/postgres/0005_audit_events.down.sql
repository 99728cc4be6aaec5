DROP TABLE IF EXISTS audit_events;
