"""A task's command as a process (app/worker/process.py): started without a fork of the worker
where setpriv is installed, yet failing to start as before, dying with the worker, and seen to
end when it ends."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.worker.process import ExitWatch, exited, spawn
from tests.support.waiting import wait_until

LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and pidfds are Linux's")


class TestSpawn:
    @pytest.mark.parametrize("command", ["fenceline-no-such-command", "./fenceline-no-such-file"])
    def test_a_command_not_found_cannot_start(self, tmp_path: Path, command: str):
        with pytest.raises(FileNotFoundError):
            spawn([command], dict(os.environ), tmp_path / "spool.log")

    def test_a_file_that_is_not_executable_cannot_start(self, tmp_path: Path):
        script = tmp_path / "script.sh"
        script.write_text("#!/bin/sh\necho hi\n")
        with pytest.raises(PermissionError):
            spawn([str(script)], dict(os.environ), tmp_path / "spool.log")

    @LINUX
    def test_the_command_runs_as_itself_in_its_own_group(self, tmp_path: Path):
        spool = tmp_path / "spool.log"
        proc = spawn(["sh", "-c", "echo $$ $(cut -d' ' -f5 /proc/$$/stat) $0"], dict(os.environ), spool)
        assert proc.wait(10) == 0
        pid, pgid, name = spool.read_text().split()
        assert int(pid) == proc.pid == int(pgid) and name == "sh"  # setpriv, if any, exec'd it in place

    @LINUX
    def test_the_command_dies_with_the_worker(self, tmp_path: Path):
        """The worker killed outright takes its task with it (PR_SET_PDEATHSIG, through setpriv
        where it is installed)."""
        program = ("import os, sys; from pathlib import Path; from app.worker.process import spawn; "
                   "p = spawn(['sleep', '60'], dict(os.environ), Path(sys.argv[1])); print(p.pid, flush=True); "
                   "import time; time.sleep(60)")
        worker = subprocess.Popen([sys.executable, "-c", program, str(tmp_path / "spool.log")],
                                  stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
        task = int(worker.stdout.readline())
        # setpriv asks for the death signal, then execs the command: kill the worker only after
        # that, or a loaded machine lets the kill land between the two.
        wait_until(lambda: Path(f"/proc/{task}/comm").read_text().strip() == "sleep", "the command to start")
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        deadline = time.monotonic() + 10
        while not dead(task) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert dead(task)


def dead(pid: int) -> bool:
    """Gone, or a zombie (an orphan's reaper, PID 1, may be slow to reap it, or never do)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


class TestExitWatch:
    @LINUX
    def test_it_wakes_when_the_command_ends_without_reaping_it(self, tmp_path: Path):
        proc = spawn(["true"], dict(os.environ), tmp_path / "spool.log")
        watch = ExitWatch(proc.pid)
        try:
            started = time.monotonic()
            while not exited(proc):
                watch.wait(5.0)
            assert time.monotonic() - started < 2.0
            assert proc.returncode is None  # not reaped: its group ID stays reserved
        finally:
            watch.close()
        assert proc.wait(5) == 0

    @LINUX
    def test_it_watches_past_the_thousandth_open_descriptor(self, tmp_path: Path):
        """A worker of many tasks holds many descriptors: a pidfd numbered past select()'s
        1023 is still waited on (and woken) like any other."""
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip(f"this process may open only {hard} descriptors")
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200) if hard == resource.RLIM_INFINITY
                                                    else min(max(soft, 1200), hard), hard))
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
        try:
            proc = spawn(["sleep", "0.2"], dict(os.environ), tmp_path / "spool.log")
            watch = ExitWatch(proc.pid)
            try:
                assert watch.fd is not None and watch.fd > 1023
                started = time.monotonic()
                while not exited(proc):
                    watch.wait(5.0)
                assert time.monotonic() - started < 2.0
            finally:
                watch.close()
            assert proc.wait(5) == 0
        finally:
            for fd in held:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
