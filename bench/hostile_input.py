"""Hostile input against a real `fenceline serve` (issue 30), three figures:

- bodies: 4 concurrent 100 MB requests without a token to each of POST /auth/token, /v1/runs and
  /v1/admin/snapshot (two with Content-Length, two chunked): the server's peak RSS growth while
  they are sent (goal: < 20 MB), each request's time to its answer, and the slowest
  /health/live answer meanwhile (goal: < 100 ms);
- heads: 4 concurrent 50 MB `X-Big` headers on /health: peak RSS growth and the answers;
- slow: 500 connections that send part of a head and stop: how many the server still holds
  after its head timeout (+2 s), and whether a new request is answered meanwhile;
- stalled (issue 41): 1,000 connections spread over POST /auth/token, /v1/attempts/batch and
  /v1/admin/snapshot, each declaring a body (`--stall-bytes`, just under 1 MiB) without a token
  and sending all of it but its last byte, then nothing: peak RSS growth, what stays held after
  they leave, connections still open 5 s past the body deadline (the server runs with
  FENCELINE_REQUEST_BODY_TIMEOUT_SECONDS=5), and a running attempt's heartbeat p50 meanwhile;
- rotation (issue 41): 16 clients guessing admin's password for 20 s, each guess from a new
  address (X-Forwarded-For, the loopback a trusted proxy): how many guesses had their password
  checked (401) and how many were refused unchecked (429), the heartbeat p50 quiet and meanwhile,
  and then the right password from a client that logged in before the attack and from a new one.

Issue 41's figures, SQLite, short runs on a loaded machine (2 cores, load average about 13 from
other work), before at 15e7989 and after on its branch:

| figure | before | after |
|---|---|---|
| 1,000 stalled 1 MiB bodies: peak RSS growth; still held after they left | 1,080 MB; 723 MB | 0.9 MB; 0.9 MB |
| the same: connections open 23 s later; answers | 1,000; none | 0; 401 × 666 at once, 413 × 334 at once |
| 1,000 stalled 60,000-byte bodies (logins take 64 KiB): RSS growth; open after the deadline | 72 MB; 1,000 | 25 MB; 0 |
| 16 rotating guessers, 20 s: guesses; passwords checked | 2,646; 2,646 | 6,407; 14 |
| the same: heartbeat p50 quiet, meanwhile | 7.7 ms, 92 ms | 6.5 ms, 40 ms |
| then the right password: a client that logged in before; a new client | 201; 201 | 201; 429 |

Run it from the tree to measure (the server is `python -m app.cli serve` from the working
directory): `python bench/hostile_input.py [--backend sqlite|postgresql] [--only bodies|heads|slow|stalled|rotation]`.
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
from common import Server, admit, concurrent_rate, percentile, table  # noqa: E402

from tests.support.api import ADMIN_PASSWORD, bearer  # noqa: E402

PIECE = b"x" * (1024 * 1024)
FIGURES = ["bodies", "heads", "slow", "stalled", "rotation"]
BODY_DEADLINE = 5.0  # FENCELINE_REQUEST_BODY_TIMEOUT_SECONDS of the server measured (a shorter run)
SETTLE = 5.0  # seconds after the deadline when the stalled connections are counted (a loaded machine lags)


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


class Probe:
    """One request every 50 ms on its own connection while the block runs (GET /health/live unless
    `send` says otherwise): every latency, the slowest, and how many failed."""

    def __init__(self, url: str, send: Callable[[httpx.Client], httpx.Response] | None = None) -> None:
        self.url, self.send = url, send or (lambda client: client.get("/health/live"))
        self.samples: list[float] = []
        self.failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    @property
    def slowest(self) -> float:
        return max(self.samples, default=0.0)

    @property
    def p50_ms(self) -> float:
        return percentile(self.samples, 0.5) * 1000 if self.samples else float("nan")

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    self.send(client).raise_for_status()
                except httpx.HTTPError:
                    self.failures += 1
                self.samples.append(time.perf_counter() - started)
                self.stop.wait(0.05)

    def __enter__(self) -> "Probe":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def heartbeat_probe(server: Server, client: httpx.Client, operator: dict[str, str]) -> Probe:
    """A Probe heartbeating one running attempt, as a worker of the fleet does."""
    client.post("/v1/runs", headers=operator, json={"dag_id": "hostile", "run_id": f"probe-{time.time_ns()}",
                                                    "tasks": [{"task_id": "t", "payload": {"command": ["true"]}}]})
    worker = admit(client, operator, f"hostile-probe-{time.time_ns()}")
    (item,) = client.post("/v1/dispatch/claim", json={"limit": 1}, headers=worker).json()["items"]
    attempt = bearer(item["attempt_token"])
    client.post("/v1/attempts/report", json={"state": "running"}, headers=attempt).raise_for_status()
    return Probe(server.url, lambda http: http.post("/v1/attempts/heartbeat", headers=attempt))


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
        with server.peak_rss() as rss, Probe(server.url) as probe:
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
    with server.peak_rss() as rss, Probe(server.url) as probe:
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


def _open_or_answered(sock: socket.socket, answers: dict[str, int]) -> bool:
    """Whether the server still holds `sock` open; counts the status line it answered, if any."""
    sock.setblocking(False)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        status = got.split(b"\r\n", 1)[0].decode(errors="replace")[9:12] or "none"
        answers[status] = answers.get(status, 0) + 1
    return False


def stalled(server: Server, connections: int, length: int, deadline: float) -> None:
    """`connections` connections spread over three routes, each declaring a body of `length`
    bytes without a token and sending all of it but its last byte, then nothing."""
    host, port = server.url.removeprefix("http://").split(":")
    paths = ("/auth/token", "/v1/attempts/batch", "/v1/admin/snapshot")
    with server.client() as client:
        probe = heartbeat_probe(server, client, server.operator(client))
    body = b'{"pad": "' + b"x" * (length - 9)
    socks, answers = [], {}
    with server.peak_rss() as rss, probe:
        started = time.perf_counter()
        for n in range(connections):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(f"POST {paths[n % 3]} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {length}\r\n\r\n".encode())
            try:
                sock.sendall(body[:-1])
            except OSError:
                pass  # answered and closed before the body: what it said is read below
            socks.append(sock)
        sent_in = time.perf_counter() - started
        deadline += length / (64 * 1024)  # the server's deadline moves a second later per 64 KiB arrived
        time.sleep(max(0.0, deadline + SETTLE - (time.perf_counter() - started)))
        held = sum(_open_or_answered(sock, answers) for sock in socks)
    for sock in socks:
        sock.close()
    time.sleep(1)
    after = server.rss_bytes()
    print(f"{connections} stalled bodies of {length} bytes without a token to {', '.join(paths)} ({server.backend}), "
          f"sent in {sent_in:.1f} s")
    print(table(["server RSS before MB", "peak growth MB", "growth after they left MB",
                 f"open {deadline + SETTLE:.0f} s later", "answers", "heartbeat p50 ms", "heartbeat slowest ms"],
                [[rss[0] / 2**20, (rss[1] - rss[0]) / 2**20, (after - rss[0]) / 2**20, held,
                  " ".join(f"{k}×{v}" for k, v in sorted(answers.items())), probe.p50_ms, probe.slowest * 1000]]))
    print()


def login(url: str, password: str, address: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/auth/token", json={"username": "admin", "password": password}, timeout=60,
                      headers={"X-Forwarded-For": address, **headers})


def rotation(server: Server, clients: int, seconds: float) -> None:
    """`clients` threads guessing the operator's password for `seconds`, each guess from a new
    address (X-Forwarded-For, the server trusting the loopback as its proxy); then the owner's
    right password, from a client that logged in before the attack and from a new one."""
    device = login(server.url, ADMIN_PASSWORD, "10.255.255.1").json().get("device_token", "")
    with server.client() as client:
        operator = server.operator(client)
        with heartbeat_probe(server, client, operator) as quiet:
            time.sleep(2)
        probe = heartbeat_probe(server, client, operator)
    counts: dict[int, int] = {}
    lock = threading.Lock()
    addresses = iter(range(1, 2**24))

    def guess(n: int, deadline: float, samples: list[float]) -> None:
        with server.client() as http:
            while time.monotonic() < deadline:
                with lock:
                    a = next(addresses)
                started = time.perf_counter()
                status = http.post("/auth/token", json={"username": "admin", "password": f"guess-{a}"},
                                   headers={"X-Forwarded-For": f"10.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}"}
                                   ).status_code
                samples.append(time.perf_counter() - started)
                with lock:
                    counts[status] = counts.get(status, 0) + 1

    with probe:
        row = concurrent_rate(clients, seconds, guess)
    known = login(server.url, ADMIN_PASSWORD, "10.255.255.1", **{"Fenceline-Device": device}).status_code
    stranger = login(server.url, ADMIN_PASSWORD, "10.255.255.2").status_code
    print(f"{clients} clients guessing admin's password for {seconds:.0f} s, each guess from a new address "
          f"({server.backend})")
    print(table(["guesses", "password checked (401)", "refused unchecked (429)", "heartbeat p50 ms quiet",
                 "heartbeat p50 ms meanwhile", "owner after (logged in before)", "owner after (new client)"],
                [[row[1], counts.get(401, 0), counts.get(429, 0), quiet.p50_ms, probe.p50_ms, known, stranger]]))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--only", choices=FIGURES, action="append")
    parser.add_argument("--stalled", type=int, default=1000, help="stalled connections")
    parser.add_argument("--stall-bytes", type=int, default=1024 * 1024 - 1, help="each stalled body's declared length")
    parser.add_argument("--guessers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the guessers guess")
    args = parser.parse_args()
    figures = args.only or FIGURES
    with Server(args.backend, trusted_proxies='["127.0.0.1"]',
                request_body_timeout_seconds=str(BODY_DEADLINE)) as server:
        with server.client() as client:  # warm the server up as a client would
            server.operator(client)
        if "bodies" in figures:
            bodies(server, args.megabytes)
        if "heads" in figures:
            heads(server)
        if "slow" in figures:
            slow(server)
        if "stalled" in figures:
            stalled(server, args.stalled, args.stall_bytes, BODY_DEADLINE)
        if "rotation" in figures:
            rotation(server, args.guessers, args.seconds)


if __name__ == "__main__":
    main()
