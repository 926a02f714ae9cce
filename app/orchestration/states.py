"""Task instance states and the sets the rails are built from."""

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

ALL = (NONE, SCHEDULED, QUEUED, RUNNING, SUCCESS, FAILED, UP_FOR_RETRY, UP_FOR_RESCHEDULE,
       INFRA_FAILED, UPSTREAM_FAILED)
IN_FLIGHT = (QUEUED, RUNNING)  # bound to an execution; settled only through the fence
FINISHED = (SUCCESS, FAILED, INFRA_FAILED, UPSTREAM_FAILED)
FAILED_STATES = (FAILED, INFRA_FAILED, UPSTREAM_FAILED)
CLEARABLE = (SUCCESS, FAILED, INFRA_FAILED, UPSTREAM_FAILED, QUEUED, RUNNING, UP_FOR_RETRY, UP_FOR_RESCHEDULE)

# Infrastructure reasons an attempt may be unexecutable for (contract 2.4).
INFRA_REASONS = ("evicted", "oom_killed", "node_lost", "deadline_exceeded", "agent_lost",
                 "dispatch_lost", "worker_lost", "dispatch_failed")
