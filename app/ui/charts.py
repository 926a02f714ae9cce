"""The runs page's small charts: attempts per minute by how they ended, over the last hours.

One small bar chart per outcome kind, each on its own scale, so that a handful of infra
re-places stays visible beside thousands of successes. Laid out here, drawn as inline SVG.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

HOURS = 3
MINUTES = HOURS * 60
BAR_W, CHART_H = 2, 40
KINDS = {"success": "succeeded", "app": "failed (application)", "infra": "re-placed (infra fault)"}


@dataclass(frozen=True)
class Bar:
    x: int
    y: float
    height: float
    title: str


@dataclass
class Chart:
    kind: str
    label: str
    total: int
    peak: int
    bars: list[Bar]
    bar_w: int = BAR_W
    width: int = MINUTES * BAR_W
    height: int = CHART_H

    @property
    def hour_marks(self) -> list[tuple[int, str]]:
        return [(h * 60 * BAR_W, f"−{HOURS - h}h" if h < HOURS else "now") for h in range(HOURS + 1)]


def since(now: datetime) -> datetime:
    """Where the charts begin: on a whole minute, so that the last of MINUTES is `now`'s."""
    return now.replace(second=0, microsecond=0) - timedelta(minutes=MINUTES - 1)


def per_minute(counts: list[tuple[int, str, int]], start: datetime) -> list[Chart]:
    """The charts from (minute, kind, count) rows, minute 0 beginning at `start`."""
    found: dict[str, dict[int, int]] = {k: {} for k in KINDS}
    for minute, kind, n in counts:
        if kind in found and 0 <= minute <= MINUTES:
            minute = min(minute, MINUTES - 1)  # a time rounded up into the next minute
            found[kind][minute] = found[kind].get(minute, 0) + n
    charts = []
    for kind, label in KINDS.items():
        minutes = found[kind]
        peak = max(minutes.values(), default=0)
        bars = []
        for minute, n in sorted(minutes.items()):
            height = max(1.0, round(CHART_H * n / peak, 1))
            clock = (start + timedelta(minutes=minute)).strftime("%H:%M")
            bars.append(Bar(minute * BAR_W, round(CHART_H - height, 1), height, f"{clock} UTC: {n} {label}"))
        charts.append(Chart(kind, label, sum(minutes.values()), peak, bars))
    return charts
