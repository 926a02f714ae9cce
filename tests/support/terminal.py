"""A command run with its stderr on a pseudo-terminal, as an operator's shell gives it."""

import contextlib
import os
import pty
import subprocess

from tests.support.servers import START_TIMEOUT


def stderr_on_terminal(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    """Run `argv` with stdout piped and stderr on a terminal; answers the finished process and
    what the terminal showed."""
    leader, follower = pty.openpty()
    with os.fdopen(leader, "rb", buffering=0) as terminal:
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=follower, timeout=START_TIMEOUT)
        os.close(follower)
        shown = b""
        with contextlib.suppress(OSError):  # the terminal's other end closed: all is read
            while chunk := terminal.read(4096):
                shown += chunk
    return done, shown.decode()
