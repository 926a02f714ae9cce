"""Storage faults on real small file systems: a tmpfs that fills up or turns read-only (an
injected OSError at the log store's boundary where none can be mounted)."""

import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app.logs.stores.file import os_faults


@contextmanager
def tmpfs(size: str) -> Iterator[Path | None]:
    """A real tmpfs of `size` (needs root), in a directory the database server may enter;
    None where none can be mounted."""
    path = Path(tempfile.mkdtemp(prefix="fenceline-small-"))
    path.chmod(0o755)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    try:
        yield path if mounted.returncode == 0 else None
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(path)], check=False)
        path.rmdir()


@contextmanager
def small_filesystem(size: str) -> Iterator[Path]:
    """tmpfs(size), skipping the test where none can be mounted."""
    with tmpfs(size) as path:
        if path is None:
            pytest.skip("cannot mount a small file system here")
        yield path


def fill(directory: Path) -> Path:
    """Write one file until the file system holding `directory` is full; answers the file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        return filler
    finally:
        os.close(fd)


def remount_read_only(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


class FailingStore:
    """A file log store whose appends fail with `code`: the OSError injected at the store
    boundary (and turned into the store's fault there, as the file store does), for faults no
    test can make a real file system produce (EIO), or where none can be mounted."""

    def __init__(self, store: Any, code: int) -> None:
        self.store, self.code = store, code

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def append(self, key: str, offset: int, data: bytes, *, session: Any = None) -> int:
        with os_faults():
            raise OSError(self.code, os.strerror(self.code))


class LogDisk:
    """The file system under `app`'s log store: a real tmpfs (`mount`) that fills up or turns
    read-only, or, where none could be mounted, the store with the same OSError injected."""

    def __init__(self, app: Any, mount: Path | None) -> None:
        self.app, self.mount, self.store = app, mount, app.state.log_store
        self.filler: Path | None = None

    def fill(self, leave: int = 0) -> None:
        """No space left, or only `leave` bytes (a page at a time)."""
        if self.mount is None:
            self.app.state.log_store = FailingStore(self.store, errno.ENOSPC)
            return
        self.filler = fill(self.mount)
        if leave:
            os.truncate(self.filler, max(0, self.filler.stat().st_size - leave))

    def read_only(self) -> None:
        if self.mount is None:
            self.app.state.log_store = FailingStore(self.store, errno.EROFS)
            return
        remount_read_only(self.mount)

    def free(self) -> None:
        self.app.state.log_store = self.store
        if self.filler is not None:
            self.filler.unlink()
