"""A try's log read in whole lines from a byte position, each line told apart as the task's own
output or the system line that opens an epoch's stream (a re-place, when it is not the try's
first). The log page's first screen and each answer of its live tail are this one reading.

A line is a system line because it begins where a segment begins, not because of what it
says, so a task that prints `::fenceline::` cannot pass for a re-place. Positions are stable:
bytes before the end of a try's log never change (a segment grows only while it is the last).
"""

from dataclasses import dataclass

from app.logs import service as logs
from app.logs.stores.base import LogStore

READ_BYTES = 64 * 1024  # the most one reading takes from the store


@dataclass(frozen=True)
class Line:
    text: str
    kind: str  # "line" (the task's output), "system" (the try's first epoch begins, or retention's line) or "replace"
    epoch: int | None = None  # a system line's epoch


@dataclass(frozen=True)
class Tail:
    start: int  # the byte the first line begins at
    next: int  # where the next reading begins
    lines: list[Line]
    finished: bool  # the try's log is complete and every byte of it has been read
    more: bool  # bytes past this reading's window are already there: read again at once


def read_lines(store: LogStore, log: logs.TryLog, start: int | None, limit: int = READ_BYTES) -> Tail:
    """Whole lines of `log` from byte `start` (None: its last `limit` bytes, from the first line
    beginning in them), reading at most `limit` bytes. A line still being written waits for its
    newline, unless it alone is longer than a reading."""
    size = log.size
    opens, position = {}, 0  # where each segment's system line begins -> (segment index, epoch)
    for index, segment in enumerate(log.segments):
        opens[position] = (index, segment.epoch)
        position += segment.length
    first = max(0, size - limit) if start is None else min(start, size)
    stop = min(size, first + limit)
    data = b"".join(logs.read(store, log, first, stop))
    cuts, newline = {p for p in opens if first < p <= stop}, data.find(b"\n")
    while newline >= 0:
        cuts.add(first + newline + 1)
        newline = data.find(b"\n", newline + 1)
    begin = min(cuts, default=stop) if start is None and first > 0 else first  # skip a partial first line
    end = stop if log.finished and stop == size else max(cuts, default=begin)
    if end <= begin and len(data) >= limit:
        end = stop
    lines = []
    bounds = [begin, *sorted(c for c in cuts if begin < c < end), end]
    for a, b in zip(bounds, bounds[1:], strict=False):
        text = data[a - first:b - first].decode(errors="replace").removesuffix("\n").removesuffix("\r")
        index, epoch = opens.get(a, (None, None))
        kind = "line" if index is None else "replace" if index and epoch is not None else "system"
        lines.append(Line(text, kind, epoch))
    return Tail(begin, end, lines if end > begin else [], finished=log.finished and end == size, more=stop < size)
