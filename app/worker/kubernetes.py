"""Admission of a worker that is a Pod of a StatefulSet: the Pod is the seat (seat = Pod name).

The server, not a file, says who this Pod is. The seat's execution history is read with the
launcher token (`GET /v1/seats/{seat}/executions`):

- no execution carries this Pod's UID: a new Pod (first of its seat, or a replacement). It
  names the seat's current execution as predecessor; an admission that lands in between is
  answered `stale-predecessor`, and the Pod reads the history again and retries.
- an execution carries this Pod's UID: the container restarted inside the same Pod. It
  re-sends the request that created that execution (the same body, with the same
  predecessor) under the same `Idempotency-Key`, derived from the Pod UID, and gets the same
  execution back with a fresh worker token (contract 1.1) — never a second execution, which
  would be refused `pod-uid-reused` and crash-loop the container.

The key being a function of the UID also covers a container that died with its admission in
flight: whichever of the two requests lands first, the other is answered with its execution.
"""

from typing import Any

from app.worker.api import Backoff, GaveUp, Refused
from app.worker.context import Context

# How many admissions landing between this Pod's read and its write it lets pass before it
# gives up (someone else keeps taking the seat).
MAX_STALE_PREDECESSOR = 10


class SeatContested(Exception):
    """Other admissions kept taking the seat."""


class PodSuperseded(Exception):
    """This Pod's execution has a successor: the Pod no longer holds its seat."""


def idempotency_key(pod_uid: str) -> str:
    return f"pod-{pod_uid}"


def admission_body(ctx: Context, previous: str | None) -> dict[str, Any]:
    """Everything here is fixed for the Pod's life, so a restarted container sends the same
    body again (the server compares a replay with the request that made the execution)."""
    s = ctx.settings
    return {"swarm": s.swarm, "role": "worker", "labels": {"agent": "fenceline-worker"},
            "runtime_backend": "kubernetes", "runtime_target": dict(s.pod or {}), "previous_execution_id": previous}


def admit_pod(ctx: Context, credential: str, call: Any) -> tuple[dict[str, Any], bool]:
    """Admit this Pod, or re-attach to the execution it was admitted as; answers (the
    admission with its worker token, re-attached or not). `call(fn, what)` runs one request,
    retried while the server is unreachable."""
    seat, uid = ctx.settings.seat, (ctx.settings.pod or {})["pod_uid"]
    key, backoff = idempotency_key(uid), Backoff()
    for _ in range(MAX_STALE_PREDECESSOR):
        history = call(lambda: ctx.api.seat_executions(credential, seat), "read the seat's executions")
        mine = [e for e in history if (e.get("runtime_target") or {}).get("pod_uid") == uid]
        if mine:
            own = mine[-1]
            if own["superseded"]:
                raise PodSuperseded(f"this Pod's execution {own['execution_id']} of seat {seat!r} was superseded; "
                                    "a newer execution holds the seat")
            previous = own["previous_execution_id"]
        else:
            previous = history[-1]["execution_id"] if history else None
        body = admission_body(ctx, previous)
        try:
            admitted = call(lambda: ctx.api.admit(credential, seat, body, key), "admission")  # noqa: B023 (called here)
            return admitted, bool(mine)
        except Refused as exc:
            if exc.type != "stale-predecessor" or mine:
                raise
            ctx.log.info("seat %s: execution %s was admitted meanwhile; reading the seat again", seat,
                         exc.problem.get("current_execution_id"))
        if ctx.stopping.wait(backoff.next_delay()):
            raise GaveUp("admission")
    raise SeatContested(f"seat {seat!r}: {MAX_STALE_PREDECESSOR} other admissions landed while this Pod was "
                        "admitting itself; is something else admitting executions of this seat?")
