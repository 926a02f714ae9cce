"""The S3 store: any S3-compatible bucket (AWS S3, MinIO, Ceph RGW, GCS interoperability).

S3 has no append, so a stream's key is a prefix of chunk objects, and which chunks exist is
decided in the database: the log_chunks rows are the chunk index, written with the append's
compare-and-swap (app/logs/stores/chunked.py). A chunk's object name is unique to its writer, so two
replicas racing at one offset never overwrite each other's object; the loser deletes its own.
Objects are never rewritten, so a reader streams each one with a (ranged) GET.

boto3 rather than obstore: its standard configuration chain (AWS_ENDPOINT_URL_S3,
AWS_ACCESS_KEY_ID, AWS_PROFILE, instance roles, …) is what operators of every S3-compatible
store already set, and its GET bodies stream in pieces (`iter_chunks`) from a sync call, which
is what the sync store contract needs; obstore's streaming advantage is for async callers.
"""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from sqlalchemy import Engine, Row, select
from sqlmodel import Session

from app.logs.stores.base import CHUNK, LogStoreFull, LogStoreUnavailable
from app.logs.stores.chunked import CHUNKS, ChunkedLogStore, database_faults

# What S3-compatible stores answer when they are out of room (MinIO, Ceph RGW, a quota).
_FULL_CODES = {"XMinioStorageFull", "QuotaExceeded", "InsufficientStorage", "StorageFull"}


@contextmanager
def s3_faults() -> Iterator[None]:
    """What the bucket answered, as the store's fault: full, or unavailable (refused, timed out)."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "unknown")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        detail = f"the bucket answered {code}: {error.get('Message', '')}"
        if code in _FULL_CODES or status == 507:
            raise LogStoreFull(detail, "bucket_full") from exc
        raise LogStoreUnavailable(detail, "bucket_unavailable") from exc
    except BotoCoreError as exc:
        raise LogStoreUnavailable(f"the bucket cannot be reached: {exc}", "bucket_unavailable") from exc


def parse(url: str) -> tuple[str, str]:
    """`s3://bucket/prefix` -> (bucket, "prefix/"); the prefix may be empty."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"an S3 log store is named s3://bucket[/prefix], not {url!r}")
    prefix = parsed.path.strip("/")
    return parsed.netloc, prefix + "/" if prefix else ""


class S3LogStore(ChunkedLogStore):
    fault_reasons = (*ChunkedLogStore.fault_reasons, "bucket_full", "bucket_unavailable")  # an index in the database
    columns = ("object_name",)
    page = 64  # index rows are small; each chunk is its own GET

    def __init__(self, url: str, engine: Engine, *, timeout_seconds: float = 10.0, client: Any = None) -> None:
        self.bucket, self.prefix = parse(url)
        super().__init__(f"s3://{self.bucket}/{self.prefix}".rstrip("/"), engine)
        # The setting bounds one operation: a single attempt (botocore's own retries made one
        # append take four times the setting), its connect and its wait for an answer sharing it.
        # The agent resends what a 503 refused, so a retry here would only hold the request longer.
        config = Config(connect_timeout=timeout_seconds / 2, read_timeout=timeout_seconds / 2,
                        retries={"total_max_attempts": 1, "mode": "standard"})
        self.client = client or boto3.session.Session().client("s3", config=config)

    def _object(self, key: str) -> str:
        return f"{self.prefix}{key}/"

    def _put(self, key: str, start: int, data: bytes) -> dict[str, str]:
        name = f"{self._object(key)}{start:020d}.{uuid.uuid4().hex}"
        with s3_faults():
            self.client.put_object(Bucket=self.bucket, Key=name, Body=data)
        return {"object_name": name}

    def _discard(self, values: dict[str, Any]) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=values["object_name"])
        except (ClientError, BotoCoreError):
            pass  # an orphan no index row names: never read, removed with its stream

    def _bytes(self, row: Row, lo: int, hi: int) -> Iterator[bytes]:
        if hi <= lo:
            return
        whole = lo == 0 and hi == row.end_offset - row.start_offset
        ranged = {} if whole else {"Range": f"bytes={lo}-{hi - 1}"}
        with s3_faults():
            body = self.client.get_object(Bucket=self.bucket, Key=row.object_name, **ranged)["Body"]
            try:
                yield from body.iter_chunks(CHUNK)
            finally:
                body.close()

    def _erase(self, session: Session, keys: list[str]) -> None:
        """The objects the index names for these streams, a thousand per request. (An object
        whose writer lost its race was deleted by that writer; one whose request failed after
        its PUT is never named by the index, so never read.)"""
        with database_faults():
            names = session.execute(select(CHUNKS.c.object_name).where(
                CHUNKS.c.store == self.name, CHUNKS.c.key.in_(keys))).scalars().all()
        with s3_faults():
            for batch in range(0, len(names), 1000):
                objects = {"Objects": [{"Key": name} for name in names[batch:batch + 1000]], "Quiet": True}
                done = self.client.delete_objects(Bucket=self.bucket, Delete=objects)
                if errors := done.get("Errors"):
                    raise LogStoreUnavailable(f"the bucket kept {len(errors)} objects: {errors[0]}",
                                              "bucket_unavailable")

    def probe(self) -> None:
        name, payload = f"{self.prefix}.probe/{uuid.uuid4().hex}", b"probe"
        with s3_faults():
            self.client.put_object(Bucket=self.bucket, Key=name, Body=payload)
            try:
                if self.client.get_object(Bucket=self.bucket, Key=name)["Body"].read() != payload:
                    raise LogStoreUnavailable("the probe object read back different bytes", "probe")
            finally:
                self.client.delete_object(Bucket=self.bucket, Key=name)
        super().probe()  # and the chunk index
