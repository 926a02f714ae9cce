"""Hostile bodies: 4 concurrent 100 MB requests without a token (two with Content-Length, two
chunked, to POST /auth/token and POST /v1/runs), against a real `fenceline serve`. Prints the
server's peak RSS growth while they are sent (goal: < 20 MB) and each request's time to its 413.

    python bench/hostile_input.py [--backend sqlite|postgresql] [--megabytes 100]
"""

import argparse
import select
import socket
import sys
import threading
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--megabytes", type=int, default=100)
    args = parser.parse_args()
    requests = [("/auth/token", False), ("/auth/token", True), ("/v1/runs", False), ("/v1/runs", True)]
    with Server(args.backend) as server:
        with server.client() as client:  # warm the server up as a client would
            server.operator(client)
        with server.peak_rss() as rss:
            results: list[list[object]] = [[] for _ in requests]

            def send(n: int, path: str, chunked: bool) -> None:
                status, seconds, sent = hostile(server.url, path, args.megabytes, chunked)
                results[n] = [path, "chunked" if chunked else "Content-Length", status, seconds * 1000, sent]

            senders = [threading.Thread(target=send, args=(n, *r)) for n, r in enumerate(requests)]
            for t in senders:
                t.start()
            for t in senders:
                t.join()
            time.sleep(0.5)  # what the server does after answering counts too
    print(f"{len(requests)} x {args.megabytes} MB bodies without a token ({args.backend})")
    print(table(["route", "framing", "answer", "ms to answer", "MB sent by then"], results))
    print(f"server RSS: {rss[0] / 2**20:.1f} MB before, peak growth {(rss[1] - rss[0]) / 2**20:.1f} MB "
          f"(goal < 20 MB)")


if __name__ == "__main__":
    main()
