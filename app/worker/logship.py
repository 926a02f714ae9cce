"""Shipping an attempt's spool file to the log API in chunks, each at the offset the server
should already hold, so a retried or repeated chunk is never stored twice."""

import os
from collections.abc import Callable
from pathlib import Path

from app.worker.api import Api, Refused

MAX_CHUNK = 256 * 1024  # raw bytes per append; well under the server's per-request limit


def utf8_cut(data: bytes) -> int:
    """The longest prefix of `data` that does not end inside a multi-byte UTF-8 character, so
    each chunk decodes exactly as the whole stream would (invalid bytes become U+FFFD)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last lead (or ASCII) byte
            need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return len(data) - back if need > back else len(data)
    return len(data)


class LogShipper:
    """Tracks two positions: `file_pos`, the spool bytes already shipped, and `server_size`,
    the byte length the server holds for them (they differ only where invalid UTF-8 was
    replaced). Both are journaled with an outcome, so a restarted worker ships the tail; they
    change together (one attribute, `at`), so another thread never reads one moved without the
    other."""

    def __init__(self, api: Api, spool: Path, token: Callable[[], str], file_pos: int = 0,
                 server_size: int = 0, log: Callable[[str], None] = lambda _: None) -> None:
        self.api, self.spool, self.token, self.log = api, spool, token, log
        self.at = (file_pos, server_size)

    @property
    def file_pos(self) -> int:
        return self.at[0]

    @property
    def server_size(self) -> int:
        return self.at[1]

    def pending(self) -> bool:
        try:
            return self.spool.stat().st_size > self.file_pos
        except FileNotFoundError:
            return False

    def ship_once(self, final: bool = False) -> bool:
        """One append of what is new in the spool; False when there was nothing to send.
        `final` sends a trailing partial character too (the writer is gone). Raises
        ServerUnreachable (nothing moved: the same chunk goes next time), Stale, Refused."""
        try:
            with self.spool.open("rb") as handle:
                handle.seek(self.file_pos)
                data = handle.read(MAX_CHUNK)
        except FileNotFoundError:
            return False
        cut = len(data) if final and len(data) < MAX_CHUNK else utf8_cut(data)
        if cut == 0:
            return False
        content = data[:cut].decode("utf-8", errors="replace")
        try:
            self.api.append_log(self.token(), self.server_size, content, urgent=final)
        except Refused as exc:
            if exc.type != "log-offset-gap":
                raise
            # The server holds less than we shipped (its store lost a tail): carry on from
            # its end rather than stall; what it lost cannot be re-derived from here.
            stored = int(exc.problem.get("stored_size", 0))
            self.log(f"log store holds {stored} bytes, expected {self.server_size}; continuing from there")
            self.at = (self.file_pos, stored)
            self.api.append_log(self.token(), self.server_size, content, urgent=final)
        # The server's answer may be larger (an earlier send of this range landed); the next
        # chunk still goes at our own count, and the server skips what it already has.
        self.at = (self.file_pos + cut, self.server_size + len(content.encode()))
        return True

    def ship_all(self) -> None:
        """Everything in the spool, the writer being gone."""
        while self.ship_once(final=True):
            pass


def append_line(spool: Path, line: str) -> None:
    """Add the worker's own line to the attempt's log, on a line of its own."""
    with spool.open("a+b") as out:
        size = out.seek(0, os.SEEK_END)
        unterminated = size > 0 and os.pread(out.fileno(), 1, size - 1) != b"\n"
        out.write(b"\n" * unterminated + line.encode() + b"\n")
