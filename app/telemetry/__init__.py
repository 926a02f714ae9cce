"""Metrics, request observation, log format and tracing: imports no domain (the worker may use it)."""
