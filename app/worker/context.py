"""What every task of one worker shares: the server, the state directory, the stop signals."""

import logging
import os
import threading
import time
from dataclasses import dataclass, field

from app.worker.api import Api
from app.worker.settings import WorkerSettings
from app.worker.state import StateDir

# After the grace period, an outcome the server cannot take within this long stays in the
# journal for the next start rather than hold the worker up.
DELIVERY_AFTER_HALT_SECONDS = 10.0
# Test hook: die (SIGKILL) right after journaling an outcome, before reporting it.
CRASH_AFTER_JOURNAL_ENV = "FENCELINE_WORKER_TEST_CRASH_AFTER_JOURNAL"


@dataclass
class Context:
    api: Api
    state: StateDir
    settings: WorkerSettings
    log: logging.Logger
    # No new claims; running tasks have the grace period to finish.
    stopping: threading.Event = field(default_factory=threading.Event)
    # The grace period is over: whatever still runs is stopped and reported worker_lost.
    halt: threading.Event = field(default_factory=threading.Event)
    halted_at: float | None = None
    # Set whenever a slot frees up or a signal arrives, so the claim loop looks again at once.
    wake: threading.Event = field(default_factory=threading.Event)
    crash_after_journal: bool = field(default_factory=lambda: os.environ.get(CRASH_AFTER_JOURNAL_ENV) == "1")

    def halt_now(self) -> None:
        if not self.halt.is_set():
            self.halted_at = time.monotonic()
            self.halt.set()
        self.stopping.set()
        self.wake.set()

    def delivery_overdue(self) -> bool:
        """True once an outcome has waited long enough after the halt: keep it for next start."""
        return self.halted_at is not None and time.monotonic() > self.halted_at + DELIVERY_AFTER_HALT_SECONDS
