"""The object guard (app/fencing/s3.py) against moto's S3 server over HTTP: the fence rides in
the object's metadata, a stale token writes nothing, and of two attempts racing the superseded
one never has the last word. moto checks If-Match and If-None-Match on PutObject as S3 does;
that the check and the write are one atomic step under concurrent puts is S3's promise, which
only real S3 (or another store that makes it) confirms."""

import uuid
from functools import partial

import boto3
import pytest
from botocore.exceptions import ClientError

from app.fencing import Fence, StaleToken
from app.fencing.s3 import KEY_META, TOKEN_META, ForeignFence, put_object
from tests.support.concurrency import together

SUPERSEDED, REPLACEMENT = Fence("ti-1", 1), Fence("ti-1", 3)


@pytest.fixture
def s3(s3_bucket):
    return boto3.client("s3")


def read(s3, bucket: str, key: str) -> tuple[bytes, dict[str, str]]:
    got = s3.get_object(Bucket=bucket, Key=key)
    return got["Body"].read(), got["Metadata"]


class TestPutObject:
    def test_the_fence_rides_in_the_metadata_and_a_stale_token_writes_nothing(self, s3, s3_bucket):
        key = f"out/{uuid.uuid4()}.csv"
        put_object(s3, s3_bucket, key, b"replacement", fence=REPLACEMENT, ContentType="text/csv",
                   Metadata={"owner": "etl"})
        with pytest.raises(StaleToken) as refused:
            put_object(s3, s3_bucket, key, b"superseded", fence=SUPERSEDED)
        assert refused.value.stored == 3
        body, metadata = read(s3, s3_bucket, key)
        assert body == b"replacement"
        assert metadata == {"owner": "etl", KEY_META: "ti-1", TOKEN_META: "3"}

    def test_an_equal_token_writes_again_and_a_larger_one_moves_the_fence(self, s3, s3_bucket):
        key = f"out/{uuid.uuid4()}"
        for fence, body in ((SUPERSEDED, b"first"), (SUPERSEDED, b"again"), (REPLACEMENT, b"later")):
            put_object(s3, s3_bucket, key, body, fence=fence)
        assert read(s3, s3_bucket, key) == (b"later", {KEY_META: "ti-1", TOKEN_META: "3"})

    def test_an_object_fenced_by_another_key_is_not_overwritten(self, s3, s3_bucket):
        key = f"out/{uuid.uuid4()}"
        put_object(s3, s3_bucket, key, b"theirs", fence=Fence("ti-2", 1))
        with pytest.raises(ForeignFence):
            put_object(s3, s3_bucket, key, b"mine", fence=REPLACEMENT)
        assert read(s3, s3_bucket, key)[0] == b"theirs"

    def test_the_first_write_is_conditional_too(self, s3, s3_bucket):
        """A plain object that appears between the read and the put is not overwritten blind:
        the put carries If-None-Match, the store refuses it, and the guard reads again."""
        key = f"out/{uuid.uuid4()}"
        s3.put_object(Bucket=s3_bucket, Key=key, Body=b"x", Metadata={KEY_META: "ti-1", TOKEN_META: "5"})
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket=s3_bucket, Key=key, Body=b"y", IfNoneMatch="*")
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        with pytest.raises(StaleToken):
            put_object(s3, s3_bucket, key, b"z", fence=REPLACEMENT)


class TestRace:
    ROUNDS = 20  # 200 rounds ran clean on moto too

    def test_the_superseded_attempt_never_has_the_last_word(self, s3, s3_bucket):
        """Two attempts of one task instance put the same object at once, each with its own
        client, released together: the object ends as the replacement wrote it."""
        fences = {"superseded": SUPERSEDED, "replacement": REPLACEMENT}
        clients = {who: boto3.client("s3") for who in fences}

        def attempt(who: str, key: str) -> bool:
            try:
                put_object(clients[who], s3_bucket, key, who.encode(), fence=fences[who])
                return True
            except StaleToken:
                return False

        refused = 0
        for _ in range(self.ROUNDS):
            key = f"race/{uuid.uuid4()}"
            landed = together({who: partial(attempt, who, key) for who in fences})
            assert landed["replacement"], "the replacement is never refused"
            refused += not landed["superseded"]
            assert read(s3, s3_bucket, key)[0] == b"replacement"
        print(f"superseded refused in {refused} of {self.ROUNDS} rounds, overwritten in the rest")
