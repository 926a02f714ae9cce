"""Operator administration: export and restore."""
