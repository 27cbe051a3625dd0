/// The disk cache's tables (see ``CacheDatabase``).
extension CacheDatabase {
    /// Version 1. `key` is unique: one entry per key. The index on (last_access, cost) serves
    /// the eviction order and, covering `cost`, the sum of the costs without reading the rows
    /// (which hold small bodies) when the usage row (``usageSchema``) is missing.
    static let schema = """
        CREATE TABLE IF NOT EXISTS responses (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            key TEXT NOT NULL UNIQUE,
            url TEXT,
            kind INTEGER NOT NULL,
            status INTEGER NOT NULL,
            http_version TEXT NOT NULL,
            response_fields TEXT NOT NULL,
            mime_type TEXT,
            expected_length INTEGER NOT NULL,
            text_encoding TEXT,
            request_fields TEXT NOT NULL,
            request_time REAL NOT NULL,
            response_time REAL NOT NULL,
            storage_policy INTEGER NOT NULL,
            user_info BLOB,
            body_size INTEGER NOT NULL,
            body_file TEXT,
            body BLOB,
            cost INTEGER NOT NULL,
            last_access REAL NOT NULL
        );
        CREATE INDEX IF NOT EXISTS responses_lru ON responses (last_access, cost);
        CREATE INDEX IF NOT EXISTS responses_response_time ON responses (response_time);
        """

    /// The sum of the costs, kept by triggers as rows come and go, so that the usage a store
    /// reports is one row read: the sum over the index took about 300 instructions a row, on
    /// every store (616,000 with 2,000 entries, three quarters of a request that stored its
    /// response). Added to a file of any version when missing (a store made before it, or by
    /// a Courier without it, whose writes the triggers count all the same).
    static let usageSchema = """
        CREATE TABLE IF NOT EXISTS usage (id INTEGER PRIMARY KEY CHECK (id = 0), total INTEGER NOT NULL);
        INSERT OR IGNORE INTO usage (id, total) SELECT 0, COALESCE(SUM(cost), 0) FROM responses;
        CREATE TRIGGER IF NOT EXISTS usage_insert AFTER INSERT ON responses
            BEGIN UPDATE usage SET total = total + NEW.cost WHERE id = 0; END;
        CREATE TRIGGER IF NOT EXISTS usage_delete AFTER DELETE ON responses
            BEGIN UPDATE usage SET total = total - OLD.cost WHERE id = 0; END;
        CREATE TRIGGER IF NOT EXISTS usage_update AFTER UPDATE OF cost ON responses
            BEGIN UPDATE usage SET total = total - OLD.cost + NEW.cost WHERE id = 0; END;
        """
}
