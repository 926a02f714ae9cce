"""Runs and task instances: readiness, retry policy, and the named rails.

Orchestration decides what happens next from an outcome (success, failed, unexecutable,
rescheduled); it never looks at a worker, a Pod or a heartbeat. The rail table is states.py;
the rails are built from cas.py (the guarded compare-and-swap, the run's lock), by family:
outcomes.py (an attempt's outcome, the retry policy, the try's archive), readiness.py (which
waiting task instances may start, the run's state), promotion.py (the time-driven rails) and
operator.py (clear, mark).
"""
