"""The load generator's HTTP client: one keep-alive HTTP/1.1 connection per simulated agent on
asyncio streams. On a 2-core machine the load generator shares the CPU with the server and the
database, and httpx costs it about half a millisecond a request (the server's own cost per
request is of that order), so the figures of bench/ drive the server with this instead."""

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit


class HttpError(Exception):
    """An answer the benchmark did not expect (status, body)."""


class Connection:
    """One HTTP/1.1 connection to `url`, reopened when the server has closed it between requests
    (uvicorn's keep-alive timeout). Not for concurrent use: one agent, one connection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._reader = self._writer = None

    async def __aenter__(self) -> "Connection":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """Send one request (a JSON body when `body` is not None, bytes being JSON already
        encoded); answers (status, body)."""
        payload = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", f"Content-Length: {len(payload)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        raw = ("\r\n".join(head) + "\r\n\r\n").encode() + payload
        for attempt in (1, 2):
            if self._writer is None or self._reader is None or self._reader.at_eof():
                await self.close()
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            try:
                self._writer.write(raw)
                return await self._answer()
            except (ConnectionError, asyncio.IncompleteReadError):
                await self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _answer(self) -> tuple[int, bytes]:
        assert self._reader is not None
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if fields.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while size := int((await self._reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16):
                body += await self._reader.readexactly(size + 2)
                del body[-2:]
            await self._reader.readuntil(b"\r\n")  # the trailer's end
        else:
            body = await self._reader.readexactly(int(fields.get("content-length", "0")))
        if fields.get("connection", "").lower() == "close":
            await self.close()
        return status, bytes(body)

    async def json(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                   expect: int = 200) -> Any:
        """The JSON answer of a request that must answer `expect` (HttpError otherwise)."""
        status, data = await self.request(method, path, body, headers)
        if status != expect:
            raise HttpError(status, data[:500])
        return json.loads(data) if data else None
