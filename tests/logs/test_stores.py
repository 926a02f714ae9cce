"""The LogStore contract, the same for every store: ranges, idempotent appends, conflicts and
gaps, replicas racing at one offset, listing and removal, the probe, and faults."""

import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlmodel import Session

from app.logs.stores.base import LogConflict, LogGap, LogStoreUnavailable
from app.logs.stores.s3 import S3LogStore
from app.main import create_app
from tests.support.api import Operator, Worker, assert_problem
from tests.support.concurrency import BARRIER_TIMEOUT, race
from tests.support.scrape import sample
from tests.support.servers import LiveServer
from tests.support.settings import app_settings

KEY = "dag/run/t/-1/1.e1.log"


def content(store, key=KEY, start=0, end=None) -> bytes:
    return b"".join(store.read(key, start, end))


class TestStreams:
    def test_appended_chunks_read_back_in_any_range(self, store, put, engine):
        parts = [b"first\n", os.urandom(300_000), b"tail"]  # the middle one spans several read chunks
        offset = 0
        for part in parts:
            offset = put(KEY, part, offset)
        whole = b"".join(parts)
        with Session(engine) as session:
            assert store.size(KEY, session=session) == len(whole)
        assert content(store) == whole
        with Session(engine) as session:  # within a session: read in its transaction, the same bytes
            inside = store.within(session)
            for start, end in [(0, 3), (3, 6), (4, 200_000), (6, 300_006), (299_000, None), (len(whole), None)]:
                assert content(store, KEY, start, end) == whole[start:end] == content(inside, KEY, start, end)

    def test_a_resent_chunk_is_stored_once(self, put, store):
        assert put(KEY, b"abc") == 3
        assert put(KEY, b"abc") == 3
        assert put(KEY, b"bcde", 1) == 5
        assert content(store) == b"abcde"

    def test_other_bytes_at_a_stored_offset_conflict_and_a_gap_is_refused(self, put, store):
        put(KEY, b"abcde")
        with pytest.raises(LogConflict) as clash:
            put(KEY, b"aXc", 0)
        with pytest.raises(LogGap) as gap:
            put(KEY, b"z", 9)
        assert (clash.value.stored, gap.value.stored) == (5, 5)
        assert content(store) == b"abcde"

    def test_a_missing_stream_has_no_size_and_reads_empty(self, store, engine):
        with Session(engine) as session:
            assert store.size("dag/run/t/-1/9.log", session=session) is None
        assert content(store, "dag/run/t/-1/9.log") == b""

    def test_keys_list_every_stream_and_delete_removes_them(self, store, put, engine):
        keys = ["a/r/t/-1/1.log", "a/r/t/-1/1.e2.log", "b/r/t/3/2.e1.log"]
        for key in keys:
            put(key, key.encode())
        assert sorted(store.keys()) == sorted(keys)
        with Session(engine) as session:
            store.delete(keys[:2] + ["a/r/t/-1/never.log"], session=session)
            session.commit()
        assert list(store.keys()) == keys[2:]
        assert content(store, keys[0]) == b"" and content(store, keys[2]) == keys[2].encode()
        if store.name.startswith("s3://"):  # and the bucket keeps only the remaining stream's object
            left = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix)["Contents"]
            assert [o["Key"].rsplit("/", 1)[0] for o in left] == [store.prefix + keys[2]]

    def test_the_probe_writes_reads_and_leaves_nothing(self, store):
        store.probe()
        assert list(store.keys()) == []


class TestRaces:
    ROUNDS, WRITERS = 20, 4

    def _rounds(self, store, engine, data_of):
        """WRITERS threads, each with its own connection, append at one offset at once, ROUNDS
        times; answers each round's outcomes (the size, or the refusal) by writer."""
        barrier = threading.Barrier(self.WRITERS, timeout=BARRIER_TIMEOUT)
        step = len(data_of(0, 0))

        def writer(n):
            outcomes = []
            for r in range(self.ROUNDS):
                barrier.wait()
                with Session(engine) as session:
                    try:
                        outcomes.append(store.append(KEY, r * step, data_of(n, r), session=session))
                        session.commit()
                    except LogConflict:
                        outcomes.append("conflict")
            return outcomes

        with ThreadPoolExecutor(self.WRITERS) as pool:
            return list(zip(*pool.map(writer, range(self.WRITERS)), strict=True))

    def test_replicas_appending_one_offset_at_once_never_both_win(self, store, engine):
        rounds = self._rounds(store, engine, lambda n, r: f"w{n} r{r:03d}\n".encode())  # 8 bytes
        winners = []
        for r, outcomes in enumerate(rounds):
            assert sorted(outcomes, key=str) == sorted([(r + 1) * 8] + ["conflict"] * (self.WRITERS - 1), key=str)
            winners.append(next(n for n, o in enumerate(outcomes) if o != "conflict"))
        assert content(store) == b"".join(f"w{n} r{r:03d}\n".encode() for r, n in enumerate(winners))

    def test_the_same_bytes_from_replicas_at_once_are_stored_once(self, store, engine):
        rounds = self._rounds(store, engine, lambda n, r: f"line {r:03d}\n".encode())  # 9 bytes
        assert rounds == [((r + 1) * 9,) * self.WRITERS for r in range(self.ROUNDS)]
        assert content(store) == b"".join(f"line {r:03d}\n".encode() for r in range(self.ROUNDS))

    def test_two_replica_servers_appending_for_one_attempt_at_once(self, db_url, engine, store_name):
        """Two API replicas (their own app, pool and store client) on one database and store."""
        settings = app_settings(db_url, log_store=store_name)
        with LiveServer(create_app(settings)) as one, LiveServer(create_app(settings)) as two:
            with one.client() as http:
                operator = Operator(http)
                operator.create_run()
                attempt = Worker(operator).claim_one()
                for n in range(5):
                    offset = n * 8
                    results = race([one, two], [
                        lambda c, offset=offset: attempt.on(c).send_log(offset, f"A{offset:06d}\n"),
                        lambda c, offset=offset: attempt.on(c).send_log(offset, f"B{offset:06d}\n")])
                    statuses = sorted(r.status_code for r in results)
                    assert statuses == [200, 409], [r.text for r in results]
                    loser = next(r for r in results if r.status_code == 409)
                    assert assert_problem(loser, 409, "log-offset-conflict")["stored_size"] == offset + 8
                text = operator.log(attempt.ti_id)
        lines = text.splitlines()[1:]
        assert [line[1:] for line in lines] == [f"{n * 8:06d}" for n in range(5)]


class TestFaults:
    def test_an_unreachable_bucket_answers_503_and_records_nothing(self, make_client, s3_bucket, engine):
        operator = Operator(make_client(log_store="s3://no-such-bucket/logs"))
        operator.create_run()
        attempt = Worker(operator).claim_one()
        before = sample(operator, "fenceline_log_store_errors_total", reason="bucket_unavailable")
        resp = attempt.send_log(0, "line\n")
        assert "NoSuchBucket" in assert_problem(resp, 503, "log-store-unavailable")["detail"]
        assert resp.headers["retry-after"] == "5"
        assert sample(operator, "fenceline_log_store_errors_total", reason="bucket_unavailable") == before + 1
        store = operator.client.app.state.log_store
        with Session(engine) as session:
            assert store.size(f"dag/run/t/-1/1.e{attempt.epoch}.log", session=session) is None
        assert list(store.keys()) == []

    def test_a_bucket_that_never_answers_is_asked_once(self, engine, monkeypatch):
        """Issue 30: botocore's own retries made one append take several times the timeout
        setting. A bucket that accepts connections and never answers is asked once."""
        listener = socket.create_server(("127.0.0.1", 0))
        accepted: list[socket.socket] = []

        def accept() -> None:
            while True:
                try:
                    accepted.append(listener.accept()[0])
                except OSError:
                    return

        threading.Thread(target=accept, daemon=True).start()
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{listener.getsockname()[1]}")
        for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x"),
                            ("AWS_DEFAULT_REGION", "us-east-1")):
            monkeypatch.setenv(name, value)
        store = S3LogStore("s3://silent/logs", engine, timeout_seconds=0.4)
        try:
            with Session(engine) as session, pytest.raises(LogStoreUnavailable):
                store.append(KEY, 0, b"line\n", session=session)
            assert len(accepted) == 1
        finally:
            listener.close()
            for conn in accepted:
                conn.close()
