"""Paging and streaming a try's log for the Airflow routes.

Positions are byte offsets into the try's log (every epoch behind its system line); a page
ends on a line boundary, so a client that follows the continuation token sees every line
exactly once, also while an agent is still appending. Whole-log answers are streamed, never
assembled in memory.
"""

import codecs
import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii

from sqlmodel import Session
from starlette.responses import Response, StreamingResponse

from app.airflow import service
from app.auth import tokens
from app.auth.tokens import KeyRing
from app.errors import AppError
from app.logs import service as logs
from app.logs.store import LogStore
from app.web.deps import commit

PAGE_BYTES = 1024 * 1024
_SCAN = 64 * 1024
READ_BYTES = 1024 * 1024  # a streamed answer decodes and frames this much at a time


@dataclass(frozen=True)
class Window:
    start: int
    end: int
    finished: bool  # the window reaches the end of a log that will not grow

    def token(self, keyring: KeyRing, ti_id: uuid.UUID, try_number: int) -> str | None:
        """None at the end of a finished log, else a signed cursor at the window's end."""
        if self.finished:
            return None
        return tokens.sign_cursor(keyring, ti_id, try_number, self.end)


def start_position(keyring: KeyRing, token: str | None, ti_id: uuid.UUID, try_number: int, log: logs.TryLog) -> int:
    """Where a page starts: 0, or the position a continuation token names (400 if forged)."""
    if not token:
        return 0
    try:
        position = tokens.read_cursor(keyring, token, ti_id, try_number)
    except tokens.InvalidToken:
        raise AppError(400, "bad-continuation-token", "Bad Signature. Please use only the tokens provided by the API.",
                       "Bad Signature. Please use only the tokens provided by the API.") from None
    return min(position, log.size)


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


def _gathered(store: LogStore, log: logs.TryLog, start: int, end: int) -> Iterator[bytes]:
    """The window's bytes, about READ_BYTES at a time (the store's reads gathered up)."""
    gathered: list[bytes] = []
    size = 0
    for chunk in logs.read(store, log, start, end):
        gathered.append(chunk)
        size += len(chunk)
        if size >= READ_BYTES:
            yield b"".join(gathered)
            gathered, size = [], 0
    if gathered:
        yield b"".join(gathered)


def text_chunks(store: LogStore, log: logs.TryLog, start: int, end: int) -> Iterator[str]:
    """The window as text, about READ_BYTES at a time; a UTF-8 character split across chunks
    is kept whole."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for data in _gathered(store, log, start, end):
        if text := decoder.decode(data):
            yield text
    if tail := decoder.decode(b"", final=True):
        yield tail


def line_runs(store: LogStore, log: logs.TryLog, start: int, end: int) -> Iterator[bytes]:
    """The window's lines about READ_BYTES at a time, each run's lines joined by newlines (no
    newline after the last; a final partial line comes alone, last). A cut at a newline never
    splits a UTF-8 character."""
    pending = b""
    for data in _gathered(store, log, start, end):
        data = pending + data
        cut = data.rfind(b"\n")
        if cut >= 0:
            yield data[:cut]
        pending = data[cut + 1:]
    if pending:
        yield pending


_EVENT = b'{"event": '
# A line to structure on its own, a JSON object or fenceline's system line, after its newline
# (a search without `^`: many times faster than a MULTILINE one).
_STRUCTURED = re.compile(b"\n(?:\\{|" + re.escape(logs.SYSTEM_PREFIX.encode()) + b")")
# What a JSON string holds as it is: printable ASCII but the quote and the backslash (and the
# newline, which _plain turns into frames).
_VERBATIM = bytes(range(0x20, 0x7F)).replace(b'"', b"").replace(b"\\", b"") + b"\n"


def structured_parts(store: LogStore, log: logs.TryLog, start: int, end: int, joiner: bytes) -> Iterator[bytes]:
    """The window's lines as Airflow 3's StructuredLogMessage JSON objects, several objects per
    part, joined by `joiner` within a part (parts are joined by the caller). A JSON line or
    fenceline's system line is structured on its own; the plain lines between them, the bulk of
    any log, are framed in bulk (_plain)."""
    frame = b"}" + joiner + _EVENT  # between one object's string and the next one's
    for data in line_runs(store, log, start, end):
        position = 0
        for found in _STRUCTURED.finditer(b"\n" + data):  # found.start(): where its line starts in data
            line_start = found.start()
            line_end = data.find(b"\n", line_start)
            line_end = len(data) if line_end < 0 else line_end
            if line_start > position:
                yield _plain(data[position:line_start - 1], frame)
            yield json.dumps(service.structured(data[line_start:line_end].decode("utf-8", "replace"))).encode()
            position = line_end + 1
        if position <= len(data):
            yield _plain(data[position:], frame)


def _plain(data: bytes, frame: bytes) -> bytes:
    """Plain lines (joined by newlines) as `{"event": <the line>}` objects, `frame` between
    them. Lines of _VERBATIM bytes only, the bulk of most logs, are their own JSON strings: only
    their newlines are replaced, by the frames. Other lines are escaped one by one (in C)."""
    if not data.translate(None, _VERBATIM):
        return _EVENT + b'"' + data.replace(b"\n", b'"' + frame + b'"') + b'"}'
    lines = data.decode("utf-8", "replace").split("\n")
    return _EVENT + frame.decode().join(map(encode_basestring_ascii, lines)).encode() + b"}"


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


INLINE_BYTES = 256 * 1024  # a window this small is answered whole, not streamed


def answer(session: Session, store: LogStore, body: Callable[[LogStore], Iterator[bytes]], window_bytes: int,
           media_type: str, headers: dict[str, str] | None = None) -> Response:
    """The answer whose parts `body(store)` makes of a window of `window_bytes` log bytes, and
    the end of the request's transaction (committed here, in the endpoint's own thread). A small
    window (most logs) is assembled now, read in the request's own transaction: no thread hop
    per part, no second connection. A larger one is streamed once the transaction has ended,
    read on the store's own short connections (memory stays flat for any size)."""
    if window_bytes <= INLINE_BYTES:
        whole = b"".join(body(store.within(session)))
        commit(session)
        return Response(whole, media_type=media_type, headers=headers)
    commit(session)
    parts = body(store)
    # Its first part (64 KiB and more: store bytes) is made now, so that a store that cannot be
    # read answers 503 before anything is sent, not a 200 cut short (issue 30).
    first = next(parts, b"")
    return StreamingResponse(itertools.chain((first,), parts), media_type=media_type, headers=headers)


def json_string_stream(store: LogStore, log: logs.TryLog, start: int, end: int) -> Iterator[str]:
    """The window as the inside of one JSON string literal, escaped chunk by chunk."""
    for text in text_chunks(store, log, start, end):
        yield json.dumps(text)[1:-1]


def preferred(accept: str | None, offered: list[str], default: str) -> str | None:
    """The offered media type the Accept header prefers (ties go to the first offered);
    `default` when there is no header; None when nothing offered is acceptable."""
    if not accept:
        return default
    best, best_q = None, 0.0
    for part in accept.split(","):
        media, *params = [p.strip() for p in part.split(";")]
        q = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        for candidate in offered:
            if media in (candidate, "*/*", candidate.split("/")[0] + "/*") and q > best_q:
                best, best_q = candidate, q
    return best
