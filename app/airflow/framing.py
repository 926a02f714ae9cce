"""The Airflow framing of a try's log: continuation tokens, the media type an Accept header
prefers, Airflow 3's StructuredLogMessage objects and v1's JSON string, and the answer (whole or
streamed). The byte pages they frame are app/logs/paging.py's.
"""

import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring_ascii

from sqlmodel import Session
from starlette.responses import Response, StreamingResponse

from app.airflow import service
from app.auth import tokens
from app.auth.tokens import KeyRing
from app.errors import AppError
from app.logs import service as logs
from app.logs.paging import Window, line_runs, text_chunks
from app.logs.stores.base import LogStore
from app.web.deps import commit


def continuation_token(keyring: KeyRing, window: Window, ti_id: uuid.UUID, try_number: int) -> str | None:
    """None at the end of a finished log, else a signed cursor at the window's end."""
    if window.finished:
        return None
    return tokens.sign_cursor(keyring, ti_id, try_number, window.end)


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
    # read answers 503 before anything is sent, not a 200 cut short.
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
