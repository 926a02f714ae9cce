"""The shared assertion of the identity domain: a refusal grants nothing and changes nothing."""

from collections.abc import Callable
from typing import Any

import httpx

from tests.factories import Client
from tests.scrape import identity_conflicts


def seat_state(client: Client, headers: dict[str, str], seat: str) -> list[Any]:
    """Everything a user can read about `seat`: its projection, its history and the occupants."""
    urls = (f"/v1/seats/{seat}", f"/v1/seats/{seat}/executions", "/v1/occupants")
    return [client.get(url, headers=headers).json() for url in urls]


def refused(
    client: Client, headers: dict[str, str], send: Callable[[], httpx.Response], type: str, *,
    seat: str = "etl-worker-1", swarm: str = "etl",
) -> dict[str, Any]:
    """Send a request that must be refused with 409 `type`; assert it changed nothing about
    `seat` and counted once in execution_identity_conflicts_total{swarm, reason}. Answers
    the problem document."""
    before, counted = seat_state(client, headers, seat), identity_conflicts(client, headers, swarm, type)
    resp = send()
    assert resp.status_code == 409, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["type"] == type
    assert seat_state(client, headers, seat) == before
    assert identity_conflicts(client, headers, swarm, type) == counted + 1
    return resp.json()
