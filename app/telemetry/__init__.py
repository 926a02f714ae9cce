"""Metrics, request observation, log format and tracing, and the words the agents share with the
server (reasons.py): imports no domain (the worker may use it)."""
