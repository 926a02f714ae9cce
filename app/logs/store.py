"""The log store: append-only byte streams under keys.

`FileLogStore` keeps each key as a file under a root directory. An append is idempotent under
retry: the writer says at which offset it believes the stream ends; bytes already stored are
not written twice (and must be the same bytes), and a gap is refused. Data is fsynced before the append returns, and a
crash mid-append can only leave a torn tail after every earlier chunk, never corrupt one.
Several processes may append to one store: a per-file lock orders them.
"""

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

CHUNK = 64 * 1024


class LogGap(Exception):
    """The writer's offset is past the end of the stored stream."""

    def __init__(self, stored: int) -> None:
        super().__init__(f"stored size is {stored}")
        self.stored = stored


class LogConflict(Exception):
    """Bytes the writer resends differ from what is stored at that offset."""

    def __init__(self, stored: int) -> None:
        super().__init__(f"stored size is {stored}")
        self.stored = stored


class LogStore(Protocol):
    def size(self, key: str) -> int | None:
        """The stream's length in bytes; None if it does not exist."""

    def append(self, key: str, offset: int, data: bytes) -> int:
        """Store `data` as the bytes from `offset`; answers the new length. LogGap if
        `offset` is beyond the end; bytes before the end must equal what is stored (a retry),
        else LogConflict."""

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The stream's bytes in [start, end), in chunks."""


def _safe(key: str) -> str:
    parts = key.split("/")
    if any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise ValueError(f"unsafe log key {key!r}")
    return key


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


class FileLogStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / _safe(key)

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def append(self, key: str, offset: int, data: bytes) -> int:
        """An OSError (a full or read-only file system, an I/O error) leaves the stream as it
        was: a partly written chunk is cut off again, and a stream this append created is
        removed."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        stored = 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            stored = os.fstat(fd).st_size
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
            _undo(fd, stored, path if created else None)
            raise
        finally:
            os.close(fd)  # closing releases the lock

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        try:
            handle = self._path(key).open("rb")
        except FileNotFoundError:
            return
        with handle:
            handle.seek(start)
            remaining = None if end is None else max(0, end - start)
            while remaining is None or remaining > 0:
                chunk = handle.read(CHUNK if remaining is None else min(CHUNK, remaining))
                if not chunk:
                    return
                if remaining is not None:
                    remaining -= len(chunk)
                yield chunk
