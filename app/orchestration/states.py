"""States, and the rail table: every transition a task instance can make, as data.

Each rail names the states it may move a task instance from and the state it moves it to.
The rails' guarded UPDATEs take their `state IN sources` from this table (cas.cas), so a
rail cannot move a row out of a state it was not declared for, whatever its caller read.
"""

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    """A task instance's state."""

    NONE = "none"  # waiting for upstream tasks
    SCHEDULED = "scheduled"  # ready to be claimed once next_eligible_at has passed
    QUEUED = "queued"  # claimed by a worker, user code not yet acknowledged
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    UP_FOR_RESCHEDULE = "up_for_reschedule"
    INFRA_FAILED = "infra_failed"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"  # never ran: its run was cancelled before it started (Airflow's word)


class AttemptState(StrEnum):
    """How one attempt epoch's record stands: in flight, ended by its outcome (named as the
    report named it), or ended from outside by a hand-back or an operator rail."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    UNEXECUTABLE = "unexecutable"
    RESCHEDULED = "rescheduled"
    RELEASED = "released"  # handed back before user code started
    CLEARED = "cleared"  # fenced off by an operator's clear
    MARKED_SUCCESS = "marked_success"  # fenced off by an operator's mark
    MARKED_FAILED = "marked_failed"
    CANCELLED = "cancelled"  # fenced off by an operator's cancel of the run


# Module-level names for the task instance states, as the rest of the code reads them.
NONE, SCHEDULED, QUEUED, RUNNING = State.NONE, State.SCHEDULED, State.QUEUED, State.RUNNING
SUCCESS, FAILED, INFRA_FAILED, UPSTREAM_FAILED = State.SUCCESS, State.FAILED, State.INFRA_FAILED, State.UPSTREAM_FAILED
UP_FOR_RETRY, UP_FOR_RESCHEDULE, SKIPPED = State.UP_FOR_RETRY, State.UP_FOR_RESCHEDULE, State.SKIPPED

ALL = tuple(State)
IN_FLIGHT = (QUEUED, RUNNING)  # bound to an execution; settled only through the fence
FINISHED = (SUCCESS, FAILED, INFRA_FAILED, UPSTREAM_FAILED, SKIPPED)
FAILED_STATES = (FAILED, INFRA_FAILED, UPSTREAM_FAILED)
NOT_SUCCEEDED = (*FAILED_STATES, SKIPPED)  # finished without success: a downstream task will not run
AWAITING = (NONE, SCHEDULED, UP_FOR_RETRY, UP_FOR_RESCHEDULE)  # unfinished, nothing in flight
CLEARABLE = (*FINISHED, QUEUED, RUNNING, UP_FOR_RETRY, UP_FOR_RESCHEDULE)


@dataclass(frozen=True)
class Rail:
    """One named transition: the states it may move from, and the state it moves to."""

    name: str
    sources: frozenset[State]
    target: State
    new_epoch: bool  # starts a new execution attempt: bumps attempt_epoch, clears the heartbeat


def _rail(name: str, sources: tuple[State, ...], target: State, *, new_epoch: bool) -> Rail:
    return Rail(name, frozenset(sources), target, new_epoch)


# Dispatch and the agent's own writes.
CLAIM = _rail("claim", (SCHEDULED,), QUEUED, new_epoch=True)
START = _rail("start", (QUEUED,), RUNNING, new_epoch=False)  # `running` acknowledged
REQUEUE = _rail("requeue", (QUEUED,), SCHEDULED, new_epoch=True)  # a claim handed back unstarted
# Outcome routing (an agent's report, an observation, or a reaper's mark).
SUCCEED = _rail("succeed", IN_FLIGHT, SUCCESS, new_epoch=False)
FAIL_FOR_RETRY = _rail("fail_for_retry", IN_FLIGHT, UP_FOR_RETRY, new_epoch=False)
FAIL = _rail("fail", IN_FLIGHT, FAILED, new_epoch=False)
INFRA_FAIL = _rail("infra_fail", IN_FLIGHT, INFRA_FAILED, new_epoch=False)
REPLACE_AFTER_INFRA_FAULT = _rail("replace_after_infra_fault", IN_FLIGHT, SCHEDULED, new_epoch=True)
RESCHEDULE = _rail("reschedule", IN_FLIGHT, UP_FOR_RESCHEDULE, new_epoch=False)
# Time-driven promotions.
RESET_FOR_RETRY = _rail("reset_for_retry", (UP_FOR_RETRY,), SCHEDULED, new_epoch=True)
REDISPATCH_AFTER_RESCHEDULE = _rail("redispatch_after_reschedule", (UP_FOR_RESCHEDULE,), SCHEDULED, new_epoch=True)
# Readiness, judged under the run's lock.
READY = _rail("ready", (NONE,), SCHEDULED, new_epoch=False)
UPSTREAM_FAIL = _rail("upstream_fail", (NONE,), UPSTREAM_FAILED, new_epoch=False)
REOPEN = _rail("reopen", (UPSTREAM_FAILED,), NONE, new_epoch=False)  # an upstream was cleared
# Operator rails: each fences off any attempt in flight.
CLEAR = _rail("clear", CLEARABLE, NONE, new_epoch=True)
# Clearing a run's failed tasks clears what its cancel skipped too: the way to resume a cancelled run.
CLEAR_FAILED = _rail("clear_failed", NOT_SUCCEEDED, NONE, new_epoch=True)
MARK_SUCCESS = _rail("mark_success", tuple(st for st in ALL if st != SUCCESS), SUCCESS, new_epoch=True)
MARK_FAILED = _rail("mark_failed", tuple(st for st in ALL if st != FAILED), FAILED, new_epoch=True)
# Cancelling a run ends what is in flight as failed (the attempt fenced off) and skips the rest
# that has not finished, as Airflow's "mark run failed" does.
CANCEL = _rail("cancel", IN_FLIGHT, FAILED, new_epoch=True)
SKIP = _rail("skip", AWAITING, SKIPPED, new_epoch=False)
# Re-place now: the operator's word that an attempt cannot finish where it is. It routes as
# `unexecutable` (reason operator_replaced) on the infra budget, like a reaper's mark.
REPLACE = _rail("replace", IN_FLIGHT, SCHEDULED, new_epoch=True)
# The reapers' marks, one per reason. Each routes its attempt as `unexecutable`: to SCHEDULED
# (re-placed) or INFRA_FAILED (budget spent), like an agent's infra report, but only from the
# states its own reason may find an attempt in.
AGENT_LOST = _rail("agent_lost", (RUNNING,), SCHEDULED, new_epoch=True)  # heartbeat silent
DISPATCH_LOST = _rail("dispatch_lost", (QUEUED,), SCHEDULED, new_epoch=True)  # never reported running
WORKER_LOST = _rail("worker_lost", IN_FLIGHT, SCHEDULED, new_epoch=True)  # execution superseded/terminal
REAPER_MARKS = {rail.name: rail for rail in (AGENT_LOST, DISPATCH_LOST, WORKER_LOST)}

RAILS: tuple[Rail, ...] = (
    CLAIM, START, REQUEUE, SUCCEED, FAIL_FOR_RETRY, FAIL, INFRA_FAIL, REPLACE_AFTER_INFRA_FAULT, RESCHEDULE,
    RESET_FOR_RETRY, REDISPATCH_AFTER_RESCHEDULE, READY, UPSTREAM_FAIL, REOPEN, CLEAR, CLEAR_FAILED,
    MARK_SUCCESS, MARK_FAILED, CANCEL, SKIP, REPLACE, AGENT_LOST, DISPATCH_LOST, WORKER_LOST,
)
