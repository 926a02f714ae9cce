"""The shared assertion of the identity domain: a refusal grants nothing and changes nothing."""

from collections.abc import Callable
from typing import Any

import httpx

from tests.support.api import Operator, assert_problem
from tests.support.scrape import identity_conflicts


def seat_state(operator: Operator, seat: str) -> list[Any]:
    """Everything a user can read about `seat`: its projection, its history and the occupants."""
    urls = (f"/v1/seats/{seat}", f"/v1/seats/{seat}/executions", "/v1/occupants")
    return [operator.get(url).json() for url in urls]


def refused(
    operator: Operator, send: Callable[[], httpx.Response], type: str, *,
    seat: str = "etl-worker-1", swarm: str = "etl",
) -> dict[str, Any]:
    """Send a request that must be refused with 409 `type`; assert it changed nothing about
    `seat` and counted once in execution_identity_conflicts_total{swarm, reason}. Answers
    the problem document."""
    before, counted = seat_state(operator, seat), identity_conflicts(operator, swarm, type)
    problem = assert_problem(send(), 409, type)
    assert seat_state(operator, seat) == before
    assert identity_conflicts(operator, swarm, type) == counted + 1
    return problem
