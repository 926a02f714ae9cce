"""The HTTP connection layer under the application: uvicorn's
httptools protocol with a bound on each request head and a deadline to finish it.

A request line and its headers larger than `max_head_bytes` in all are refused with 431 and
the connection closed, before more of them is stored (the parser is fed no more than the
limit; a pipelined head that begins within bytes being fed counts all of them, and one that
begins within a body's last read may pass it by that read); a head not finished within
`head_timeout` seconds of its first byte (or of the connection, for one that sends nothing) closes the
connection, so slow or silent clients cannot hold the server's file descriptors. Idle
keep-alive connections are uvicorn's `timeout_keep_alive`. The open connections are a gauge
(fenceline_http_connections_open).
"""

import json
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import Settings
from app.telemetry.metrics import http_connections_open, http_heads_refused

CONFIG_ATTRIBUTE = "fenceline_heads"  # where the limits ride on uvicorn's Config (it is pickled to workers)


@dataclass(frozen=True)
class HeadLimits:
    max_head_bytes: int
    head_timeout: float

    @classmethod
    def from_settings(cls, settings: Settings) -> "HeadLimits":
        return cls(settings.max_request_head_bytes, settings.request_head_timeout_seconds)


def _refusal(max_head_bytes: int) -> bytes:
    body = json.dumps({"type": "request-header-fields-too-large", "title": "Request header fields too large",
                       "status": 431, "detail": f"A request line and its headers carry at most {max_head_bytes} "
                                                "bytes in all."}).encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/problem+json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))


class GuardedProtocol(HttpToolsProtocol):
    """HttpToolsProtocol, bounding each request head in size and in time."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.limits: HeadLimits = getattr(config, CONFIG_ATTRIBUTE)
        self._in_head, self._head_bytes = True, 0
        # Whether a head or a message ended within the bytes being fed, and a request began after.
        self._ended = self._begun_after_end = False
        self._head_timer: Any = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        http_connections_open.inc()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        http_connections_open.dec()
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Feed the parser no more of a head than the limit allows: a head still unfinished at the
        limit is refused (431) before more of it is stored. Body bytes pass as they come."""
        while data:
            if self._in_head:
                room = self.limits.max_head_bytes - self._head_bytes
                if room <= 0:
                    self._refuse()
                    return
                piece, data = data[:room], data[room:]
                self._head_bytes += len(piece)
            else:
                piece, data = data, b""
            self._ended = self._begun_after_end = False
            super().data_received(piece)
            if self.parser is None or self.transport.is_closing():
                return
            if self._in_head and self._ended:
                # A head or a message ended within the piece. If another request began after it,
                # where is unknown: the whole piece counts towards its head (never less).
                self._head_bytes = len(piece) if self._begun_after_end else 0

    def _refuse(self) -> None:
        http_heads_refused.labels(reason="too_large").inc()
        self._disarm_head_timer()
        self.transport.write(_refusal(self.limits.max_head_bytes))
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun_after_end = self._ended
        self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes, self._ended = False, 0, True
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head, self._head_bytes, self._ended = True, 0, True  # what comes next is a head
        super().on_message_complete()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and self.transport is not None and not self.transport.is_closing():
            http_heads_refused.labels(reason="timeout").inc()
            self.transport.close()


def server_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """uvicorn's Config for `app` (an application, or an import string with factory=True) with
    the guarded protocol, the keep-alive bound and the drain's grace period of `settings`."""
    # The supervisor of `--workers N` kills a process that does not answer its ping within this
    # many seconds; a process still importing on a loaded node answers late, and uvicorn's 5 s
    # killed it over and over (seen at a load average of 15: serve never came up).
    config = uvicorn.Config(app, http=GuardedProtocol, timeout_keep_alive=settings.keep_alive_timeout_seconds,
                            timeout_graceful_shutdown=settings.drain_grace_seconds, timeout_worker_healthcheck=30,
                            **options)
    setattr(config, CONFIG_ATTRIBUTE, HeadLimits.from_settings(settings))
    return config
