"""How one execution attempt's identity travels: from a token, an observation or a claim."""

import uuid
from dataclasses import dataclass
from typing import Protocol


class _HasAttempt(Protocol):
    id: uuid.UUID
    try_number: int
    attempt_epoch: int


class AttemptIdentity(Protocol):
    """What names one attempt (contract 2, 3): its task instance, where that task sits, and the
    try and epoch. An attempt token carries these, a WorkItem's correlation repeats them, and the
    fence and the claim read them off the row (tests/test_structure.py holds each to this list)."""

    id: uuid.UUID
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    attempt_epoch: int


# The fields of AttemptIdentity beside the id, which each place names its own way (the row's id,
# the correlation's ti_id, the token's sub).
ATTEMPT_FIELDS = tuple(name for name in AttemptIdentity.__annotations__ if name != "id")


@dataclass(frozen=True)
class AttemptKey:
    """(task_instance_id, try_number, attempt_epoch): one attempt of one try (contract 2).
    A settling write names the key it settles; the fence compares it with the live row."""

    ti_id: uuid.UUID
    try_number: int
    attempt_epoch: int

    @classmethod
    def of(cls, ti: _HasAttempt) -> "AttemptKey":
        """The attempt a task instance row is on now."""
        return cls(ti.id, ti.try_number, ti.attempt_epoch)
