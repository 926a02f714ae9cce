"""Log stores: one attempt appends a log of --log-mb (default 200) MB in 1 MB appends, then the
collapsed log of its try is read whole, three times, through the native text route and the
Airflow 3 NDJSON route — from each store (file, database, S3 on moto's server as the stand-in
bucket) on a throw-away PostgreSQL database. Prints append and read throughput and the server's
resident memory before and at its peak while reading (Server.peak_rss).
Run: python bench/log_stores.py [--log-mb 200] [--stores file,database,s3]."""

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Server, admit, table  # noqa: E402
from tests.support.s3 import moto_s3  # noqa: E402

APPEND = 1024 * 1024
MB = 1024 * 1024


@contextmanager
def moto_bucket() -> Iterator[str]:
    """moto's S3 server (tests.support.s3, which points the AWS_* variables the server
    subprocess inherits at it) and a bucket on it; answers the log store's URL."""
    with moto_s3() as endpoint:
        httpx.put(f"{endpoint}/fenceline-bench", timeout=10).raise_for_status()
        yield "s3://fenceline-bench/logs"


def fill(client: httpx.Client, operator: dict[str, str], megabytes: int) -> tuple[str, float]:
    """A finished attempt whose log holds `megabytes` MB; answers its ti_id and the append MB/s."""
    client.post("/v1/runs", headers=operator, json={"dag_id": "bench", "run_id": "r", "tasks": [
        {"task_id": "big", "payload": {"command": ["true"]}}]}).raise_for_status()
    item = client.post("/v1/dispatch/claim", json={"limit": 1},
                       headers=admit(client, operator, "bench")).json()["items"][0]
    attempt = {"Authorization": f"Bearer {item['attempt_token']}"}
    client.post("/v1/attempts/report", json={"state": "running"}, headers=attempt).raise_for_status()
    line = "x" * 99 + "\n"
    chunk = line * (APPEND // len(line))
    offset, start = 0, time.perf_counter()
    while offset < megabytes * MB:
        resp = client.post("/v1/attempts/logs", json={"offset": offset, "content": chunk}, headers=attempt)
        resp.raise_for_status()
        offset = resp.json()["size"]
    rate = offset / MB / (time.perf_counter() - start)
    client.post("/v1/attempts/report", json={"state": "success"}, headers=attempt).raise_for_status()
    return item["correlation"]["ti_id"], rate


def read_whole(client: httpx.Client, path: str, headers: dict[str, str], params: dict[str, str]) -> int:
    size = 0
    with client.stream("GET", path, headers=headers, params=params) as resp:
        resp.raise_for_status()
        for part in resp.iter_bytes():
            size += len(part)
    return size


def run(store: str, megabytes: int) -> list[list[object]]:
    with Server("postgresql", log_store=store) as server, server.client() as client:
        operator = server.operator(client)
        ti_id, append_rate = fill(client, operator, megabytes)
        routes = {"native text": (f"/v1/task-instances/{ti_id}/tries/1/log", {}, {}),
                  "v2 ndjson": ("/api/v2/dags/bench/dagRuns/r/taskInstances/big/logs/1",
                                {"Accept": "application/x-ndjson"}, {"full_content": "true"})}
        rows = []
        for name, (path, headers, params) in routes.items():
            with server.peak_rss() as rss:
                start = time.perf_counter()
                sizes = [read_whole(client, path, {**operator, **headers}, params) for _ in range(3)]
                elapsed = time.perf_counter() - start
            rows.append([store.split(":")[0], name, f"{append_rate:.0f}", f"{sum(sizes) / MB / elapsed:.0f}",
                         f"{rss[0] / MB:.0f}", f"{rss[1] / MB:.0f}", f"{(rss[1] - rss[0]) / MB:.0f}"])
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log-mb", type=int, default=200)
    parser.add_argument("--stores", default="file,database,s3")
    args = parser.parse_args()
    rows = []
    for store in args.stores.split(","):
        if store == "s3":
            with moto_bucket() as bucket:
                rows += run(bucket, args.log_mb)
        else:
            rows += run(store, args.log_mb)
    print(f"{args.log_mb} MB log, PostgreSQL, 1 MB appends; each read is the whole collapsed log, three times")
    print(table(["store", "read", "append MB/s", "read MB/s", "RSS before MB", "RSS peak MB", "growth MB"], rows))


if __name__ == "__main__":
    main()
