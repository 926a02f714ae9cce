"""Runs and task instances: readiness, retry policy, and the named rails.

Orchestration decides what happens next from an outcome (success, failed, unexecutable,
rescheduled); it never looks at a worker, a Pod or a heartbeat.
"""
