"""Prometheus metrics (served at /metrics by app/operations.py)."""

from prometheus_client import Counter

execution_identity_conflicts = Counter(
    "execution_identity_conflicts",
    "Refusals of execution admission, binding and seat writes, by swarm and reason.",
    ["swarm", "reason"],
)

agent_legacy_attempt_tokens = Counter(
    "agent_legacy_attempt_token",
    "Agent calls made with a claim-less (legacy) attempt token, without attempt_epoch.",
)
reaper_marks = Counter(
    "reaper_marks",
    "In-flight attempts the reapers routed as unexecutable, by reason.",
    ["reason"],
)
log_store_errors = Counter(
    "fenceline_log_store_errors",
    "Log store operations refused because the store was full or unavailable (answered 507 or 503), by "
    "reason: the errno name for the file store (enospc, erofs, eio, ...), database_* or bucket_* for the others.",
    ["reason"],
)
tokens_without_audience = Counter(
    "fenceline_tokens_without_audience",
    "Tokens minted before tokens named their issuer and audience, accepted within the grace period, by kind.",
    ["kind"],
)
