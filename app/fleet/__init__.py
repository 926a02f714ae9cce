"""The releases and replicas serving one database: how far back its schema may be served, and
who serves it now (contract 10)."""
