"""Paging a try's log by byte position, on line boundaries.

Positions are byte offsets into the try's log (every epoch behind its system line); a page
ends on a line boundary, so a reader that resumes at a page's end sees every line exactly once,
also while an agent is still appending. Reads are streamed, never assembled whole.
"""

import codecs
from collections.abc import Iterator
from dataclasses import dataclass

from app.logs import service as logs
from app.logs.stores.base import LogStore

PAGE_BYTES = 1024 * 1024
_SCAN = 64 * 1024
READ_BYTES = 1024 * 1024  # a streamed answer decodes and frames this much at a time


@dataclass(frozen=True)
class Window:
    start: int
    end: int
    finished: bool  # the window reaches the end of a log that will not grow


def window(store: LogStore, log: logs.TryLog, start: int, *, full: bool) -> Window:
    """[start, end) ending on a line boundary: the rest of the log when `full`, else at most
    PAGE_BYTES. A trailing partial line is held back until it is complete or the log finished."""
    end = log.size if full else min(log.size, start + PAGE_BYTES)
    if end == log.size and log.finished:
        return Window(start, end, True)
    cut = _last_newline(store, log, start, end)
    if cut is None:
        # No complete line yet: wait for more, unless a single line outgrew a whole page.
        return Window(start, end if end - start >= PAGE_BYTES else start, False)
    return Window(start, cut, False)


def _last_newline(store: LogStore, log: logs.TryLog, start: int, end: int) -> int | None:
    """The position just after the last newline in [start, end), scanning backwards."""
    hi = end
    while hi > start:
        lo = max(start, hi - _SCAN)
        found = b"".join(logs.read(store, log, lo, hi)).rfind(b"\n")
        if found >= 0:
            return lo + found + 1
        hi = lo
    return None


def batched(parts: Iterator[str] | Iterator[bytes], size: int = 64 * 1024) -> Iterator[bytes]:
    """Join small parts (text, or UTF-8 bytes) into writes of about `size` bytes."""
    buffer: list[bytes] = []
    length = 0
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        buffer.append(data)
        length += len(data)
        if length >= size:
            yield b"".join(buffer)
            buffer, length = [], 0
    if buffer:
        yield b"".join(buffer)


def text_chunks(store: LogStore, log: logs.TryLog, start: int, end: int) -> Iterator[str]:
    """The window as text, about READ_BYTES at a time; a UTF-8 character split across chunks
    is kept whole."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for data in batched(logs.read(store, log, start, end), READ_BYTES):
        if text := decoder.decode(data):
            yield text
    if tail := decoder.decode(b"", final=True):
        yield tail


def line_runs(store: LogStore, log: logs.TryLog, start: int, end: int) -> Iterator[bytes]:
    """The window's lines about READ_BYTES at a time, each run's lines joined by newlines (no
    newline after the last; a final partial line comes alone, last). A cut at a newline never
    splits a UTF-8 character."""
    pending = b""
    for data in batched(logs.read(store, log, start, end), READ_BYTES):
        data = pending + data
        cut = data.rfind(b"\n")
        if cut >= 0:
            yield data[:cut]
        pending = data[cut + 1:]
    if pending:
        yield pending
