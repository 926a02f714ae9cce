"""A replica's drain (contract 10.3): on SIGTERM or SIGINT it fails its readiness at once, and
the hooks the domains registered (the claims: stop starting, answer the waiting ones) run on the
event loop before uvicorn stops accepting and gives the requests in flight the grace period
(FENCELINE_DRAIN_GRACE_SECONDS, its timeout_graceful_shutdown)."""

import asyncio
import contextvars
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("fenceline.drain")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Drain:
    """Whether this process drains, and what to do when it begins."""

    def __init__(self) -> None:
        self.draining = False
        self._begun = False
        self._hooks: list[Callable[[], None]] = []

    def on_drain(self, hook: Callable[[], None]) -> None:
        self._hooks.append(hook)

    def begin(self) -> None:
        """Drain (once): readiness fails from now on, then every hook runs (on the event loop)."""
        self.draining = True
        if not self._begun:
            self._begun = True
            log.info("draining: not ready, no new claims, waiting claims answered")
            for hook in self._hooks:
                hook()

    def install(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """Begin on SIGTERM and SIGINT, then hand the signal to the handler in place (uvicorn's,
        which stops the server). Only the main thread may; elsewhere (a server in a test's
        thread) nothing is installed. Answers what puts the previous handlers back."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in SIGNALS}

        def handle(sig: int, frame: Any) -> None:
            self.draining = True  # readiness fails before anything else happens
            # In a context of its own: the signal may land while a request's context is current,
            # and the drain's log line would carry that request's id.
            loop.call_soon_threadsafe(self.begin, context=contextvars.Context())
            handler = previous[sig]
            if callable(handler):
                handler(sig, frame)

        for sig in SIGNALS:
            signal.signal(sig, handle)

        def uninstall() -> None:
            for sig, handler in previous.items():
                if signal.getsignal(sig) is handle:
                    signal.signal(sig, handler)

        return uninstall
