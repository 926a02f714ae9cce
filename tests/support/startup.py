"""`fenceline serve` run to its end as a child process, and the one line its refusal prints
(contract 8)."""

import subprocess
from pathlib import Path

from tests.support.ports import free_port
from tests.support.servers import FENCELINE, START_TIMEOUT, clean_env


def serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FENCELINE, "serve", "--port", str(free_port()), *args], cwd=tmp_path,
                          env={**clean_env(tmp_path / "data"), **env}, capture_output=True, text=True,
                          timeout=START_TIMEOUT)


def refused(done: subprocess.CompletedProcess, status: int, *named: str) -> str:
    """The one line a refusal prints on stderr, with `status`, naming each of `named`."""
    assert done.returncode == status, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("fenceline: ") and "Traceback" not in done.stderr
    for text in named:
        assert text in line, line
    assert "listening on" not in done.stdout + done.stderr
    return line
