"""Who may call what: operator login, worker tokens and attempt tokens."""
