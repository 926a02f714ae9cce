"""Delivering a journaled outcome: ship the log's tail, report, then forget the attempt.

The server takes an outcome only while its epoch is the live one, and takes the same outcome
twice as once; a stale-report refusal is final, so the entry is dropped.
"""

from collections.abc import Callable
from typing import Any

from app.worker.api import GaveUp, Refused, Stale, retrying
from app.worker.context import Context
from app.worker.logship import LogShipper, append_line
from app.worker.state import describe


def deliver(ctx: Context, key: str, entry: dict[str, Any], give_up: Callable[[], bool] | None = None) -> str:
    """Answers "accepted", "stale" or "refused" (dropped either way). Raises GaveUp while the
    server stays unreachable once `give_up()` (default: some time after the halt) turns true:
    the entry stays journaled for the next start."""
    give_up = give_up or ctx.delivery_overdue
    token = entry["attempt_token"]
    name = entry.get("name", key)
    say = ctx.log.info
    shipper = LogShipper(ctx.api, ctx.state.spool(key), lambda: token, entry.get("file_pos", 0),
                         entry.get("server_size", 0), log=lambda m: ctx.log.warning("%s: %s", name, m))
    try:
        retrying(shipper.ship_all, what=f"{name}: log", give_up=give_up, log=say)
    except Refused as exc:  # the report below meets the same refusal, and says it
        ctx.log.warning("%s: log tail not stored: %s", name, exc)
    what = entry["state"] + (f" ({entry['reason']})" if entry.get("reason") else "")
    try:
        retrying(lambda: ctx.api.report(token, entry["state"], entry.get("reason"), entry.get("reschedule_at")),
                 what=f"{name}: report {what}", give_up=give_up, log=say)
        result = "accepted"
        say("%s: reported %s — %s", name, what, entry.get("why", ""))
    except GaveUp:
        ctx.log.warning("%s: %s not delivered yet; kept in the journal for the next start", name, what)
        raise
    except Stale as exc:
        result = "stale"
        say("%s: %s refused as stale (%s); the attempt was re-placed, dropped", name, what, exc.type)
    except Refused as exc:
        result = "refused"
        ctx.log.error("%s: %s refused (%s); dropped", name, what, exc)
    ctx.state.forget_attempt(key)
    return result


def redeliver_journal(ctx: Context) -> dict[str, str]:
    """Every outcome a previous run journaled but never saw acknowledged, re-delivered
    (until a stop signal, while the server is unreachable)."""
    results = {}
    for key, entry in ctx.state.journaled().items():
        ctx.log.info("%s: re-delivering journaled outcome %s", entry.get("name", key), entry["state"])
        results[key] = deliver(ctx, key, entry, give_up=ctx.stopping.is_set)
    return results


def hand_back_lost(ctx: Context, key: str, record: dict[str, Any]) -> str:
    """An attempt a previous process of this same execution held when it died (a restarted
    container): its epoch is still live, so it is journaled and delivered as `unexecutable`
    `worker_lost` — re-placed on the infra budget — with whatever of its log the spool kept
    (re-sent from the start: the server skips the bytes it holds)."""
    why = "the worker's container restarted while the task ran"
    append_line(ctx.state.spool(key), f"[fenceline-worker] {why}: reporting unexecutable (worker_lost)")
    entry = {"name": describe(record["correlation"]), "correlation": record["correlation"],
             "attempt_token": record["attempt_token"], "state": "unexecutable", "reason": "worker_lost",
             "why": why, "file_pos": 0, "server_size": 0}
    ctx.state.journal(key, entry)
    return deliver(ctx, key, entry, give_up=ctx.stopping.is_set)
