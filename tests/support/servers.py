"""Servers under test: the app in a thread on a loopback port (LiveServer), and the real
`fenceline serve` command as a child process (Served)."""

import asyncio
import os
import pty
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from app.main import create_app
from tests.support.ports import free_port
from tests.support.settings import app_settings
from tests.support.waiting import wait_until, wait_until_serving

# The installed console command, as a user runs it.
FENCELINE = [str(Path(sys.executable).with_name("fenceline"))]
START_TIMEOUT = 60
# How long a stopping live server lets the requests still in flight finish before it cancels
# them: a waiting claim whose client is still there would otherwise hold the stop for its wait.
STOP_GRACE_SECONDS = 3


class ThreadedUvicorn(uvicorn.Server):
    """uvicorn's server, remembering its event loop (to reach the app's hub from the test's thread)."""

    loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)


class LiveServer:
    """A real uvicorn server on a loopback port (a free one, or `port`: the same address again
    after a stop), in a thread."""

    def __init__(self, app: FastAPI, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = ThreadedUvicorn(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                              timeout_graceful_shutdown=STOP_GRACE_SECONDS))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def app(self) -> FastAPI:
        return self.server.config.app

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        wait_until(lambda: self.server.started, "the live server to start", timeout=20,
                   unless=lambda: not self.thread.is_alive())
        return self

    def __exit__(self, *exc: object) -> None:
        self.end_gone_claims()
        self.server.should_exit = True
        self.thread.join(timeout=20)

    def settle(self) -> None:
        """Once the claims of clients that have gone have ended, and no request is in flight
        (a server shared by several tests, before the next one)."""
        self.end_gone_claims()
        wait_until(lambda: not self.app.state.wakeups.waiting and self.idle(),
                   "the live server's claims and requests to end", timeout=10)

    def end_gone_claims(self) -> None:
        """Wake every waiting claim once: those whose client has gone (a worker killed or
        stopped) end at once, instead of when their wait runs out; the others wait again."""
        hub, loop = self.app.state.wakeups, self.server.loop
        if loop is not None and not loop.is_closed() and hub.waiting:
            loop.call_soon_threadsafe(lambda: hub.wake(hub.waiting))

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)

    def idle(self) -> bool:
        """Whether no request is being served now."""
        return not self.server.server_state.tasks


@contextmanager
def live_servers(db_url: str) -> Iterator[Callable[..., LiveServer]]:
    """A starter of live servers on `db_url` with setting overrides (on `port`, to bring one back
    after a stop); every server it started is stopped when the block ends."""
    with ExitStack() as running:
        def start(port: int | None = None, **overrides: Any) -> LiveServer:
            return running.enter_context(LiveServer(create_app(app_settings(db_url, **overrides)), port))

        yield start


def clean_env(data_dir: Path | None = None) -> dict[str, str]:
    """This environment with no fenceline settings (and the data directory `data_dir`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCELINE_") and k != "DATABASE_URL"}
    return env if data_dir is None else {**env, "FENCELINE_DATA_DIR": str(data_dir)}


class Served:
    """`fenceline serve` (or `command`) as a child process on a free port (or `port`), its
    output collected by a thread: from a pipe, or from a pseudo-terminal (`terminal`), as an
    operator's shell gives it."""

    def __init__(self, cwd: Path | None, env: dict[str, str], *args: str, command: list[str] = FENCELINE,
                 terminal: bool = False, port: int | None = None) -> None:
        self.port = port or free_port()  # `port`: the same address again, after a stop
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [*command, "serve", "--port", str(self.port), *args]
        self.lines: list[str] = []
        if terminal:
            reader, tty = pty.openpty()
            self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=tty, stderr=tty, stdin=subprocess.DEVNULL)
            os.close(tty)
            threading.Thread(target=self._collect_terminal, args=(reader,), daemon=True).start()
        else:
            self.process = subprocess.Popen(argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT)
            threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    def _collect_terminal(self, reader: int) -> None:
        with os.fdopen(reader, "rb", buffering=0) as terminal:
            try:
                while chunk := terminal.read(4096):
                    self.lines.append(chunk.decode(errors="replace").replace("\r\n", "\n"))
            except OSError:  # EIO: the child, the terminal's last writer, has ended
                pass

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_healthy(self, status: int | None = None) -> httpx.Response:
        """The first answer of GET /health (with `status`, unless None)."""
        try:
            return wait_until_serving(self.process, f"{self.url}/health", "fenceline serve", START_TIMEOUT, status)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its output:\n{self.output}") from None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
