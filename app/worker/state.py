"""The worker's state directory: which execution it is, its attempts, its outcome journal.

Layout (every file 0600, every JSON write atomic, so a crash leaves the old or the new version,
never half of one; all but the attempt records are fsynced):

    lock                      held while a worker runs: one worker per state directory
    liveness                  touched on every turn of the claim loop (app/worker/liveness.py)
    execution.json            the seat's current execution, named as predecessor on restart
    admission.json            an admission in flight (body and Idempotency-Key), replayed on restart
    attempts/{key}.json       an attempt this worker holds: correlation, attempt token, process group
    journal/{key}.json        an outcome not yet acknowledged by the server
    logs/{key}.log            the attempt's stdout and stderr, shipped to the log API from here
"""

import fcntl
import json
import os
from pathlib import Path
from typing import Any


class StateDirBusy(Exception):
    """Another worker holds this state directory."""


def write_json(path: Path, data: dict[str, Any], durable: bool = True) -> None:
    """Replace `path` atomically, and durably (on disk before it returns) unless told not to."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)
    if durable:
        _sync_dir(path.parent)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def attempt_key(correlation: dict[str, Any]) -> str:
    """One attempt's name on disk: (ti, try, epoch) is the attempt identity."""
    return f"{correlation['ti_id']}.t{correlation['try_number']}.e{correlation['attempt_epoch']}"


def describe(c: dict[str, Any]) -> str:
    """One attempt's name in the worker's log lines."""
    mapped = f"[{c['map_index']}]" if c["map_index"] >= 0 else ""
    return f"{c['dag_id']}/{c['run_id']}/{c['task_id']}{mapped} try {c['try_number']} epoch {c['attempt_epoch']}"


class StateDir:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        for sub in ("attempts", "journal", "logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Hold the directory for this process (released by the kernel when it dies)."""
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateDirBusy(f"another worker is using {self.root}") from None
        self._lock_fd = fd

    # the execution --------------------------------------------------------------------------

    @property
    def execution(self) -> dict[str, Any] | None:
        return read_json(self.root / "execution.json")

    def save_execution(self, record: dict[str, Any]) -> None:
        write_json(self.root / "execution.json", record)

    @property
    def pending_admission(self) -> dict[str, Any] | None:
        return read_json(self.root / "admission.json")

    def save_pending_admission(self, record: dict[str, Any]) -> None:
        write_json(self.root / "admission.json", record)

    def clear_pending_admission(self) -> None:
        _unlink(self.root / "admission.json")

    # attempts ------------------------------------------------------------------------------

    def spool(self, key: str) -> Path:
        return self.root / "logs" / f"{key}.log"

    def save_attempt(self, key: str, record: dict[str, Any]) -> None:
        """Atomic, not synced: the record names what to kill or hand back after the worker's
        process dies (the page cache survives that), and a crash of the machine leaves no task
        running. The journal, which must survive both, is synced."""
        write_json(self.root / "attempts" / f"{key}.json", record, durable=False)

    def attempts(self) -> dict[str, dict[str, Any]]:
        """Records that a crash of the machine left empty (not synced) are skipped: no task of
        theirs survived it."""
        return self._records("attempts", unsynced=True)

    def forget_attempt(self, key: str) -> None:
        """Drop every trace of a finished attempt: its record, journal entry and spool."""
        _unlink(self.root / "journal" / f"{key}.json")
        _unlink(self.root / "attempts" / f"{key}.json")
        _unlink(self.spool(key))

    # the outcome journal -------------------------------------------------------------------

    def journal(self, key: str, entry: dict[str, Any]) -> None:
        write_json(self.root / "journal" / f"{key}.json", entry)

    def journaled(self) -> dict[str, dict[str, Any]]:
        return self._records("journal")

    def _records(self, sub: str, unsynced: bool = False) -> dict[str, dict[str, Any]]:
        found = {}
        for path in sorted((self.root / sub).glob("*.json")):
            try:
                record = read_json(path)
            except ValueError:
                if not unsynced:
                    raise
                record = None
            if record is not None:
                found[path.stem] = record
        return found
