"""Operator administration: export and restore, and the `fenceline runs`/`tasks` commands."""
