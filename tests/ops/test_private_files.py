"""Private files (issue 41, item 4; contract 7): on the default install the data directory, the
SQLite database, the generated password and the logs are its owner's only (0600 files in 0700
directories), set when they are made and repaired at start with one warning line."""

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.logs.stores.file import FileLogStore
from tests.support.servers import Served, clean_env


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(data: Path) -> dict[str, int]:
    """The mode of everything fenceline keeps in `data` (the default install's data directory)."""
    return {str(p.relative_to(data.parent)): mode(p) for p in [data, *data.rglob("*")]}


@pytest.fixture(autouse=True)
def _common_umask() -> Iterator[None]:
    """The common default umask (files 0644, directories 0755 unless fenceline says otherwise),
    for this process and the servers it starts."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def started(tmp_path: Path) -> str:
    """The output of `fenceline serve` on the default install in tmp_path/data, once it answered."""
    with Served(tmp_path, clean_env(tmp_path / "data")) as server:
        server.wait_healthy()
        return server.output


class TestPrivateFiles:
    def test_a_fresh_install_keeps_its_files_to_its_owner(self, tmp_path):
        output = started(tmp_path)
        found = modes(tmp_path / "data")
        assert {"data/fenceline.db", "data/operator-password", "data/logs"} <= set(found), found
        assert found == {name: 0o700 if (tmp_path / name).is_dir() else 0o600 for name in found}, found
        assert "warning" not in output

    def test_start_up_repairs_what_others_could_read_in_one_warning_line(self, tmp_path):
        started(tmp_path)
        data = tmp_path / "data"
        for path in (data, data / "logs"):
            path.chmod(0o755)
        for path in (data / "fenceline.db", data / "operator-password"):
            path.chmod(0o644)
        output = started(tmp_path)
        (warning,) = [line for line in output.splitlines() if "warning" in line]
        for name in ("data/fenceline.db", "data/operator-password", "data/logs"):
            assert name in warning, warning
        found = modes(data)
        assert found == {name: 0o700 if (tmp_path / name).is_dir() else 0o600 for name in found}, found
        assert "warning" not in started(tmp_path)  # nothing left to repair


class TestLogFiles:
    def test_a_log_stream_is_a_private_file_in_private_directories(self, tmp_path):
        store = FileLogStore(tmp_path / "logs")
        assert store.append("dag/run/task/1.log", 0, b"line\n") == 5
        written = [tmp_path / "logs", *(tmp_path / "logs").rglob("*")]
        assert {p.name: mode(p) for p in written} == {
            p.name: 0o700 if p.is_dir() else 0o600 for p in written}
