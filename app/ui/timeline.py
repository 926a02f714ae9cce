"""The epoch timeline: a run as a Gantt chart, one row per task instance and one bar per attempt
epoch from its claim to its end, coloured by how the epoch ended, for inline SVG.

The wait before a re-place shows as a dashed gap between two bars of one row, a new try as a
mark across the row, and each bar's tooltip (its SVG <title>) names the seat and generation
that ran it. Everything is laid out here, on the server: the page has no script.
"""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from app.execution.models import TaskAttempt
from app.identity.models import Execution
from app.orchestration import states
from app.orchestration.models import TaskInstance
from app.orchestration.states import AttemptState
from app.ui.graph import clip

LABEL_W, CHART_W, AXIS_H, ROW_H, BAR_H, PAD = 250, 900, 24, 18, 12, 30
MIN_BAR_W = 2.0
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_TICKS = 10

# How an epoch ended, as the legend and the tooltips say it; each kind is a CSS class.
KIND_TEXT = {
    "success": "succeeded",
    "app": "application failure (spends the try)",
    "infra": "infrastructure fault (re-placed, same try)",
    "rescheduled": "rescheduled (sensor deferral, same try)",
    "released": "handed back before user code started (no budget spent)",
    "fenced": "fenced off by an operator rail",
    "live": "in flight",
    "none": "superseded without an outcome",
}
FENCED = (AttemptState.CLEARED, AttemptState.MARKED_SUCCESS, AttemptState.MARKED_FAILED)


def kind(attempt: TaskAttempt, live: bool) -> str:
    """Which KIND_TEXT an epoch is: its outcome's kind, or how it ended without one; `live` if
    it is its task instance's attempt in flight."""
    if attempt.outcome_kind is not None:
        return attempt.outcome_kind
    if attempt.state == AttemptState.RELEASED:
        return "released"
    if attempt.state in FENCED:
        return "fenced"
    return "live" if live else "none"


def describe(attempt: TaskAttempt, live: bool) -> str:
    """How the epoch ended, with the reason where there is one."""
    what = kind(attempt, live)
    text = KIND_TEXT.get(what, what)
    return f"{text}: {attempt.reason}" if attempt.reason and what not in ("released", "live") else text


def is_live(attempt: TaskAttempt, ti: TaskInstance) -> bool:
    return (ti.state in states.IN_FLIGHT
            and (attempt.try_number, attempt.attempt_epoch) == (ti.try_number, ti.attempt_epoch))


def runner_text(attempt: TaskAttempt, runners: dict[uuid.UUID, Execution]) -> str:
    if attempt.execution_id is None:
        return "no recorded execution"
    if (e := runners.get(attempt.execution_id)) is None:
        return f"execution {str(attempt.execution_id)[:8]}"
    return f"{e.seat} generation {e.generation} (execution {str(e.execution_id)[:8]})"


def _clock(t: datetime, step: float) -> str:
    return t.strftime("%H:%M:%S" if step < 60 else "%H:%M" if step < 86400 else "%m-%d %H:%M")


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}min"


@dataclass(frozen=True)
class EpochBar:
    x: float
    width: float
    kind: str
    title: str


@dataclass(frozen=True)
class Gap:
    x1: float
    x2: float
    retry: bool  # the wait before a new try (a retry), not before a re-place
    title: str


@dataclass
class Row:
    ti: TaskInstance
    y: float
    label: str
    bars: list[EpochBar]
    gaps: list[Gap]
    try_marks: list[tuple[float, int]]  # (x, try number) where a new try begins


@dataclass
class Timeline:
    rows: list[Row]
    ticks: list[tuple[float, str]]
    kinds: list[str]  # the kinds shown, for the legend
    start: datetime
    end: datetime
    width: float = LABEL_W + CHART_W + PAD
    height: float = 0


def build(tis: list[TaskInstance], attempts: list[TaskAttempt], runners: dict[uuid.UUID, Execution],
          now: datetime) -> Timeline:
    """The timeline of a run's task instances from their attempt records, as of `now`."""
    by_ti: dict[uuid.UUID, list[TaskAttempt]] = {}
    for a in sorted(attempts, key=lambda a: (a.try_number, a.attempt_epoch)):
        by_ti.setdefault(a.task_instance_id, []).append(a)
    spans: dict[uuid.UUID, list[tuple[TaskAttempt, datetime, bool]]] = {}
    for ti in tis:
        found = by_ti.get(ti.id, [])
        spans[ti.id] = []
        for i, a in enumerate(found):
            live = is_live(a, ti)
            following = found[i + 1].claimed_at if i + 1 < len(found) else None
            spans[ti.id].append((a, a.ended_at or (now if live else following or a.claimed_at), live))
    every = [(a.claimed_at, end) for found in spans.values() for a, end, _ in found]
    start = min((c for c, _ in every), default=now)
    end = max((e for _, e in every), default=now)
    scale = CHART_W / max((end - start).total_seconds(), 1.0)

    def x(t: datetime) -> float:
        return round(LABEL_W + (t - start).total_seconds() * scale, 1)

    def first_claim(ti: TaskInstance) -> tuple[int, float, str, int]:
        found = spans[ti.id]
        return (0, found[0][0].claimed_at.timestamp()) if found else (1, 0.0), ti.task_id, ti.map_index

    rows, kinds = [], set()
    for n, ti in enumerate(sorted(tis, key=first_claim)):
        name = ti.task_id + (f" [{ti.map_index}]" if ti.map_index >= 0 else "")
        row = Row(ti, AXIS_H + n * ROW_H, clip(name, 34), [], [], [])
        previous: tuple[TaskAttempt, datetime] | None = None
        for a, ended, live in spans[ti.id]:
            what = kind(a, live)
            kinds.add(what)
            until = "now" if live else _clock(ended, 1)
            row.bars.append(EpochBar(x(a.claimed_at), max(MIN_BAR_W, round(x(ended) - x(a.claimed_at), 1)), what,
                                f"{name} · try {a.try_number} epoch {a.attempt_epoch} · {describe(a, live)} · "
                                f"on {runner_text(a, runners)} · {_clock(a.claimed_at, 1)} → {until} "
                                f"({_seconds((ended - a.claimed_at).total_seconds())})"))
            if previous is not None:
                before, before_end = previous
                retry = a.try_number != before.try_number
                if retry:
                    row.try_marks.append((x(a.claimed_at), a.try_number))
                if a.claimed_at > before_end:
                    waited = _seconds((a.claimed_at - before_end).total_seconds())
                    what_next = f"try {a.try_number}" if retry else f"the re-place (epoch {a.attempt_epoch})"
                    row.gaps.append(Gap(x(before_end), x(a.claimed_at), retry, f"waited {waited} before {what_next}"))
            previous = (a, ended)
        rows.append(row)
    return Timeline(rows, _ticks(start, end, scale), [k for k in KIND_TEXT if k in kinds], start, end,
                    height=AXIS_H + len(rows) * ROW_H + PAD)


def _ticks(start: datetime, end: datetime, scale: float) -> list[tuple[float, str]]:
    """Time marks at a round step, at most MAX_TICKS of them."""
    span = max((end - start).total_seconds(), 1.0)
    day = TICK_STEPS[-1]
    step = next((st for st in TICK_STEPS if span / st <= MAX_TICKS), -(-span // (MAX_TICKS * day)) * day)
    first = -(-start.timestamp() // step) * step
    ticks, t = [], first
    while t <= end.timestamp():
        moment = datetime.fromtimestamp(t, UTC)
        ticks.append((round(LABEL_W + (moment - start).total_seconds() * scale, 1), _clock(moment, step)))
        t += step
    return ticks
