"""Moving between stores: `fenceline logs copy` (resumable, idempotent), and which store an
installation uses when FENCELINE_LOG_STORE is unset."""

import subprocess
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app.logs import stores
from app.logs.copy import copy_logs
from app.logs.stores.file import FileLogStore
from app.main import create_app
from tests.support.api import Worker
from tests.support.logs import STORES
from tests.support.servers import FENCELINE, START_TIMEOUT, clean_env
from tests.support.settings import TEST_DATA_DIR, app_settings
from tests.support.terminal import stderr_on_terminal


@pytest.fixture(params=[0, 1])
def target(request, store_name, db_url, engine):
    """One of the two other stores of the same installation, to copy into."""
    name = [kind for kind in STORES if kind != store_name.split(":")[0]][request.param]
    if name == "s3":
        name = f"s3://{request.getfixturevalue('s3_bucket')}/{uuid.uuid4().hex[:12]}"
    settings = app_settings(db_url, log_dir=TEST_DATA_DIR / "logs" / "target")
    return stores.open_store(name, settings, engine)


def logs_of(store, engine) -> dict[str, bytes]:
    return {key: b"".join(store.read(key)) for key in store.keys()}


class TestCopy:
    def test_a_second_copy_picks_up_what_was_appended_meanwhile(self, operator, store, target, engine):
        operator.create_run()
        attempt = Worker(operator).claim_one()
        attempt.append_log(0, "before the copy\n")
        first = copy_logs(store, target, engine)
        assert (first.streams, first.copied_bytes, first.conflicts) == (1, 16, [])
        attempt.append_log(16, "after it\n")
        second = copy_logs(store, target, engine)
        assert (second.copied_bytes, second.copied_streams) == (9, 1)
        assert copy_logs(store, target, engine).copied_bytes == 0  # idempotent
        assert logs_of(target, engine) == logs_of(store, engine) == {
            f"dag/run/t/-1/1.e{attempt.epoch}.log": b"before the copy\nafter it\n"}

    def test_a_stream_the_target_holds_otherwise_is_reported_and_left(self, put, store, target, engine):
        put("d/r/t/-1/1.e1.log", b"source bytes\n")
        put("d/r/t/-1/2.e1.log", b"fine\n")
        with Session(engine) as session:
            target.append("d/r/t/-1/1.e1.log", 0, b"target bytes and more\n", session=session)
            session.commit()
        report = copy_logs(store, target, engine)
        assert report.conflicts == ["d/r/t/-1/1.e1.log"] and report.copied_streams == 1
        assert logs_of(target, engine)["d/r/t/-1/1.e1.log"] == b"target bytes and more\n"
        assert not (isinstance(store, FileLogStore) and store.moved_to())  # not moved while a stream differs


class TestDefaultStore:
    def test_sqlite_uses_files_and_a_new_postgresql_installation_the_database(self, tmp_path):
        assert stores.choose(app_settings("sqlite:///x.db", data_dir=tmp_path)) == ("file", None)
        assert stores.choose(app_settings("postgresql://h/db", data_dir=tmp_path)) == ("database", None)
        assert stores.choose(app_settings("postgresql://h/db", data_dir=tmp_path, log_store="file"))[0] == "file"

    @pytest.mark.postgres_only("the database store is the default on PostgreSQL only")
    def test_logs_on_disk_keep_files_until_copied_and_the_server_says_so(self, db_url, engine, tmp_path, capsys):
        settings = app_settings(db_url, data_dir=tmp_path)
        files = FileLogStore(settings.resolved_log_dir)
        with Session(engine) as session:
            files.append("dag/run/t/-1/1.e1.log", 0, b"from before\n", session=session)
        name, note = stores.choose(settings)
        assert name == "file" and "fenceline logs copy --to database" in note
        with TestClient(create_app(settings)):  # starts and stops
            pass
        assert "fenceline logs copy --to database" in capsys.readouterr().out
        copy_logs(files, stores.open_store("database", settings, engine), engine)
        assert stores.choose(settings)[0] == "database"

    def test_the_copy_command_moves_a_file_store(self, tmp_path):
        env = clean_env(tmp_path / "data")
        log = tmp_path / "data" / "logs" / "dag" / "run" / "t" / "-1" / "1.e1.log"
        log.parent.mkdir(parents=True)
        log.write_bytes(b"a line\n")
        subprocess.run([*FENCELINE, "migrate"], env=env, check=True, capture_output=True, timeout=START_TIMEOUT)
        done = subprocess.run([*FENCELINE, "logs", "copy", "--to", "database"], env=env, capture_output=True,
                              text=True, timeout=START_TIMEOUT)
        assert done.returncode == 0, done.stderr
        assert "copied 7 bytes of 1 streams to the database store" in done.stdout
        assert "streams," not in done.stderr  # no progress bar in a pipe
        again = subprocess.run([*FENCELINE, "logs", "copy", "--to", "database"], env=env, capture_output=True,
                               text=True, timeout=START_TIMEOUT)
        assert "copied 0 bytes of 0 streams" in again.stdout
        refused = subprocess.run([*FENCELINE, "logs", "copy", "--to", "ftp://x"], env=env, capture_output=True,
                                 text=True, timeout=START_TIMEOUT)
        assert refused.returncode == 2 and "file, database or s3://" in refused.stderr


def test_the_copy_shows_a_progress_bar_on_a_terminal(tmp_path):
    env = clean_env(tmp_path / "data")
    for n in range(3):
        log = tmp_path / "data" / "logs" / "dag" / "run" / f"t{n}" / "-1" / "1.e1.log"
        log.parent.mkdir(parents=True)
        log.write_bytes(b"a line\n")
    subprocess.run([*FENCELINE, "migrate"], env=env, check=True, capture_output=True, timeout=START_TIMEOUT)
    done, shown = stderr_on_terminal([*FENCELINE, "logs", "copy", "--to", "database"], env)
    assert done.returncode == 0
    assert shown.endswith(f"[{'#' * 30}] 3/3 streams, 0.0 MiB copied\r\n")
    assert b"copied 21 bytes of 3 streams" in done.stdout
