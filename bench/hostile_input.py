"""Hostile input against a real `fenceline serve` (issue 30), three figures:

- bodies: 4 concurrent 100 MB requests without a token to each of POST /auth/token, /v1/runs and
  /v1/admin/snapshot (two with Content-Length, two chunked): the server's peak RSS growth while
  they are sent (goal: < 20 MB), each request's time to its answer, and the slowest
  /health/live answer meanwhile (goal: < 100 ms);
- heads: 4 concurrent 50 MB `X-Big` headers on /health: peak RSS growth and the answers;
- slow: 500 connections that send part of a head and stop: how many the server still holds
  after its head timeout (+2 s), and whether a new request is answered meanwhile.

Run it from the tree to measure (the server is `python -m app.cli serve` from the working
directory): `python bench/hostile_input.py [--backend sqlite|postgresql] [--only bodies]`.
"""

import argparse
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Server, table  # noqa: E402

PIECE = b"x" * (1024 * 1024)


def hostile(url: str, path: str, megabytes: int, chunked: bool) -> tuple[str, float, int]:
    """Send a `megabytes` body to `path` until the server answers; answers (status line, seconds
    from the first byte to the answer, megabytes sent by then)."""
    host, port = url.removeprefix("http://").split(":")
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {megabytes * len(PIECE)}"
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    piece = b"%x\r\n%s\r\n" % (len(PIECE), PIECE) if chunked else PIECE
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        started, sent = time.perf_counter(), 0
        sock.sendall(head.encode())
        answer = b""
        while b"\r\n" not in answer:
            readable, writable, _ = select.select([sock], [sock] if sent < megabytes else [], [], 60)
            if readable:
                got = sock.recv(4096)
                if not got:
                    break
                answer += got
            elif writable:
                try:
                    sock.sendall(piece)
                except OSError:
                    continue  # the server answered and closed: read what it said
                sent += 1
            else:
                break
        return answer.split(b"\r\n", 1)[0].decode() or "(closed)", time.perf_counter() - started, sent


class LivenessProbe:
    """GET /health/live every 50 ms on its own connection while the block runs; the slowest answer."""

    def __init__(self, url: str) -> None:
        self.url, self.slowest, self.failures = url, 0.0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    client.get("/health/live").raise_for_status()
                except httpx.HTTPError:
                    self.failures += 1
                self.slowest = max(self.slowest, time.perf_counter() - started)
                self.stop.wait(0.05)

    def __enter__(self) -> "LivenessProbe":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def concurrently(call: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """`call` on each of `items` at once, one thread each; the answers in order."""
    items = list(items)
    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(call, items))


def bodies(server: Server, megabytes: int) -> None:
    requests = [(path, chunked) for path in ("/auth/token", "/v1/runs", "/v1/admin/snapshot")
                for chunked in (False, False, True, True)]
    for path in ("/auth/token", "/v1/runs", "/v1/admin/snapshot"):
        batch = [r for r in requests if r[0] == path]
        with server.peak_rss() as rss, LivenessProbe(server.url) as probe:
            answers = concurrently(lambda r: hostile(server.url, r[0], megabytes, r[1]), batch)
            time.sleep(0.5)  # what the server does after answering counts too
        results = [[path, "chunked" if chunked else "Content-Length", status, seconds * 1000, sent]
                   for (path, chunked), (status, seconds, sent) in zip(batch, answers, strict=True)]
        print(f"{len(batch)} x {megabytes} MB bodies without a token to {path} ({server.backend})")
        print(table(["route", "framing", "answer", "ms to answer", "MB sent by then"], results))
        print(f"server RSS: {rss[0] / 2**20:.1f} MB before, peak growth {(rss[1] - rss[0]) / 2**20:.1f} MB "
              f"(goal < 20 MB); slowest /health/live meanwhile {probe.slowest * 1000:.0f} ms (goal < 100 ms), "
              f"{probe.failures} failed\n")


def big_header(url: str, megabytes: int) -> tuple[str, float]:
    """Send a /health request with one `megabytes` X-Big header; (status line, seconds)."""
    host, port = url.removeprefix("http://").split(":")
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=300) as sock:
        try:
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\nX-Big: ".encode())
            for _ in range(megabytes):
                sock.sendall(PIECE)
            sock.sendall(b"\r\n\r\n")
        except OSError:
            pass  # refused and closed: read the answer
        answer = b""
        try:
            while b"\r\n" not in answer and (got := sock.recv(4096)):
                answer += got
        except OSError:
            pass
    return answer.split(b"\r\n", 1)[0].decode() or "(closed)", time.perf_counter() - started


def heads(server: Server, megabytes: int = 50, count: int = 4) -> None:
    with server.peak_rss() as rss, LivenessProbe(server.url) as probe:
        answers = [[f"{megabytes} MB X-Big", status, seconds * 1000]
                   for status, seconds in concurrently(lambda _: big_header(server.url, megabytes), range(count))]
        time.sleep(0.5)
    print(f"{count} x {megabytes} MB headers on /health ({server.backend})")
    print(table(["header", "answer", "ms"], answers))
    print(f"server RSS: {rss[0] / 2**20:.1f} MB before, peak growth {(rss[1] - rss[0]) / 2**20:.1f} MB; "
          f"slowest /health/live meanwhile {probe.slowest * 1000:.0f} ms\n")


def slow(server: Server, connections: int = 500, timeout: float = 10.0) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    socks = []
    for _ in range(connections):
        sock = socket.create_connection((host, int(port)), timeout=5)
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode())
        socks.append(sock)
    started = time.perf_counter()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = time.perf_counter()
        status = client.get("/health/live").status_code
        answered_in = time.perf_counter() - first
    time.sleep(max(0.0, timeout + 2 - (time.perf_counter() - started)))
    held = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            held += sock.recv(1) != b""  # b"": the server closed it
        except BlockingIOError:
            held += 1  # still open, nothing sent
        except OSError:
            pass
        sock.close()
    print(f"{connections} connections with an unfinished head ({server.backend}): a new /health/live answered "
          f"{status} in {answered_in * 1000:.0f} ms; {held} still held by the server {timeout + 2:.0f} s later\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--only", choices=["bodies", "heads", "slow"], action="append")
    args = parser.parse_args()
    figures = args.only or ["bodies", "heads", "slow"]
    with Server(args.backend) as server:
        with server.client() as client:  # warm the server up as a client would
            server.operator(client)
        if "bodies" in figures:
            bodies(server, args.megabytes)
        if "heads" in figures:
            heads(server)
        if "slow" in figures:
            slow(server)


if __name__ == "__main__":
    main()
