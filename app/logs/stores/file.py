"""The file store: each stream a file under the log directory (FENCELINE_LOG_DIR)."""

import errno
import fcntl
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlmodel import Session

from app.logs.stores.base import CHUNK, LogConflict, LogGap, LogStoreFull, LogStoreUnavailable


def _safe(key: str) -> str:
    parts = key.split("/")
    if any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise ValueError(f"unsafe log key {key!r}")
    return key


# What the file system says, as the store's fault: a full one is the operator's to free, an
# unwritable one may come back; any other OSError is a bug to see, not a fault to retry.
_FULL = {errno.ENOSPC, errno.EDQUOT}
_UNAVAILABLE = {errno.EROFS, errno.EIO}


@contextmanager
def os_faults() -> Iterator[None]:
    """An OSError of the file system as the store's fault, labelled with its errno name."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _FULL | _UNAVAILABLE:
            raise
        fault = LogStoreFull if exc.errno in _FULL else LogStoreUnavailable
        raise fault(exc.strerror or str(exc), errno.errorcode[exc.errno].lower()) from exc


def _private_directories(directory: Path) -> None:
    """`directory` and its missing parents, each readable by its owner only (0700; contract 7):
    mkdir's `parents` would give the parents the umask's mode."""
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass  # made meanwhile by another append


MOVED_MARKER = "MOVED"  # written by `fenceline logs copy` once every stream was copied elsewhere


class FileLogStore:
    """Each key is a file under a root directory. Data is fsynced before the append returns,
    and a crash mid-append can only leave a torn tail after every earlier chunk, never corrupt
    one. Several processes (replicas on shared storage) may append to one store: a per-file
    lock orders them."""

    name = "file"
    fault_reasons = (*sorted(errno.errorcode[e].lower() for e in _FULL | _UNAVAILABLE), "probe")

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / _safe(key)

    def size(self, key: str, *, session: Session | None = None) -> int | None:
        try:
            with os_faults():
                return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def sizes(self, keys: list[str], *, session: Session | None = None) -> dict[str, int | None]:
        return {key: self.size(key) for key in keys}

    def within(self, session: Session) -> "FileLogStore":
        return self

    def append(self, key: str, offset: int, data: bytes, *, session: Session | None = None) -> int:
        """A failed write (a full or read-only file system, an I/O error) leaves the stream as it
        was: a partly written chunk is cut off again, and a stream this append created is removed."""
        path = self._path(key)
        with os_faults():
            _private_directories(path.parent)
            while (stored := self._append(path, offset, data)) is None:
                pass  # the stream was removed while we waited for its lock (a failed append undone)
            return stored

    @staticmethod
    def _append(path: Path, offset: int, data: bytes) -> int | None:
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        stored = 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            status = os.fstat(fd)
            if status.st_nlink == 0:
                return None
            stored = status.st_size
            if offset > stored:
                raise LogGap(stored)
            overlap = min(stored - offset, len(data))
            if overlap and os.pread(fd, overlap, offset) != data[:overlap]:
                raise LogConflict(stored)
            fresh = data[stored - offset:]
            if fresh:
                view = memoryview(fresh)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            if created:  # the new file's directory entry must survive a crash too
                dir_fd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            return stored + len(fresh)
        except OSError:
            _undo(fd, stored, path if created and stored == 0 else None)
            raise
        finally:
            os.close(fd)  # closing releases the lock

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        try:
            handle = self._path(key).open("rb")
        except FileNotFoundError:
            return
        with handle, os_faults():
            handle.seek(start)
            remaining = None if end is None else max(0, end - start)
            while remaining is None or remaining > 0:
                chunk = handle.read(CHUNK if remaining is None else min(CHUNK, remaining))
                if not chunk:
                    return
                if remaining is not None:
                    remaining -= len(chunk)
                yield chunk

    def delete(self, keys: Iterable[str], *, session: Session | None = None) -> None:
        with os_faults():
            for key in keys:
                self._path(key).unlink(missing_ok=True)

    def keys(self) -> Iterator[str]:
        """The `.log` files under the root (the probe and the moved marker are not streams)."""
        for directory, _, files in os.walk(self.root):
            base = Path(directory).relative_to(self.root)
            for name in sorted(files):
                if name.endswith(".log"):
                    yield (base / name).as_posix()

    def probe(self) -> None:
        path = self.root / ".probe" / uuid.uuid4().hex
        payload = path.name.encode()
        with os_faults():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.write_bytes(payload)
                if path.read_bytes() != payload:
                    raise LogStoreUnavailable(f"the probe object {path} read back different bytes", "probe")
            finally:
                path.unlink(missing_ok=True)

    # --- moving off the file store (`fenceline logs copy`) ----------------------------------

    def moved_to(self) -> str | None:
        """The store every stream here was copied to, if `fenceline logs copy` finished one."""
        try:
            return (self.root / MOVED_MARKER).read_text().strip() or None
        except FileNotFoundError:
            return None

    def mark_moved(self, target: str) -> None:
        (self.root / MOVED_MARKER).write_text(target + "\n")

    def holds_logs(self) -> bool:
        return next(self.keys(), None) is not None


def _undo(fd: int, size: int, created: Path | None) -> None:
    """Put a stream back as it was before a failed append (best effort: the file system that
    failed the write may fail this too, and the first error is the one to report)."""
    try:
        if created is not None:
            created.unlink(missing_ok=True)
        else:
            os.ftruncate(fd, size)
    except OSError:
        pass
