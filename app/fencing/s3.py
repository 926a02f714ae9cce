"""The guarded object write for an S3-compatible bucket (the `s3` extra: boto3).

The object carries its fence in its metadata (`fenceline-fence-key`, `fenceline-fencing-token`).
A write reads the object's metadata and ETag, refuses a token below the stored one (StaleToken,
nothing written), and puts the new object with a precondition on what it read: If-None-Match
`*` when there was no object, If-Match on its ETag otherwise. Of two writers that read the same
version, only one put succeeds; the other reads again and is judged against the winner's token.
So once a token's write has landed, no smaller token's write lands after it.
"""

from typing import Any

try:
    from botocore.exceptions import ClientError
except ModuleNotFoundError:  # the s3 extra is not installed
    raise ModuleNotFoundError("the fenced object write needs boto3: pip install 'fenceline[s3]'",
                              name="botocore") from None

from app.fencing.guard import Fence, FenceError, StaleToken

KEY_META, TOKEN_META = "fenceline-fence-key", "fenceline-fencing-token"
ATTEMPTS = 20  # reads and conditional puts before giving up on a key many writers contend for


class ForeignFence(FenceError):
    """The object is fenced by another key: tokens of different keys do not compare, so it is
    not overwritten (write each task instance's output under a key of its own, or delete it)."""


class Contended(FenceError):
    """Every conditional put lost to another writer, ATTEMPTS times in a row."""


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _stored(client: Any, bucket: str, key: str) -> tuple[str | None, dict[str, str]]:
    """The object's ETag and metadata; (None, {}) when there is no object."""
    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if _status(exc) == 404:
            return None, {}
        raise
    return head["ETag"], head.get("Metadata") or {}


def put_object(client: Any, bucket: str, key: str, body: bytes, *, fence: Fence | None = None,
               **put_args: Any) -> dict[str, Any]:
    """Put `body` at `key` unless the object there holds a larger token for the same fence (by
    default this attempt's, from the environment): StaleToken then, and the object is left as
    it is. `put_args` go to PutObject (ContentType, …; not Metadata's two fence entries).
    Answers PutObject's response."""
    fence = fence or Fence.from_env()
    extra = put_args.pop("Metadata", {})
    for _ in range(ATTEMPTS):
        etag, metadata = _stored(client, bucket, key)
        if etag is not None:
            if metadata.get(KEY_META) != fence.key:
                raise ForeignFence(f"s3://{bucket}/{key} is fenced by {metadata.get(KEY_META)!r}, not {fence.key!r}")
            stored = int(metadata.get(TOKEN_META, "-1"))
            if stored > fence.token:
                raise StaleToken(fence.key, fence.token, stored)
        condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        metadata = {**extra, KEY_META: fence.key, TOKEN_META: str(fence.token)}
        try:
            return client.put_object(Bucket=bucket, Key=key, Body=body, Metadata=metadata, **condition, **put_args)
        except ClientError as exc:
            # 412: another writer's put landed since the read; 409: one is landing now (S3
            # answers ConditionalRequestConflict); 404: the object went away since (If-Match).
            if _status(exc) not in (404, 409, 412):
                raise
    raise Contended(f"s3://{bucket}/{key}: {ATTEMPTS} conditional puts lost to other writers")
