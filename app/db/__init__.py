"""The database kit: engines and transactions (engine), column types (types), statement helpers
(statements), retryable faults (faults), and what differs between SQLite and PostgreSQL
(dialect). Imports no domain."""
