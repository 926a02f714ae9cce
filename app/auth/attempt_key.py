"""How one execution attempt's identity travels: from a token, an observation or a claim."""

import uuid
from dataclasses import dataclass
from typing import Protocol


class _HasAttempt(Protocol):
    id: uuid.UUID
    try_number: int
    attempt_epoch: int


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
