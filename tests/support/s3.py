"""An S3-compatible stand-in (this machine has no MinIO): moto's standalone server, a real HTTP
endpoint on a loopback port that boto3 talks to as to any bucket."""

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.ports import free_port
from tests.support.waiting import responds, wait_until


@contextmanager
def moto_s3() -> Iterator[str]:
    """moto's S3 server; while inside, the standard AWS_* variables point every client of this
    process (and the servers it starts) at it. Answers its endpoint."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    variables = {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        wait_until(lambda: responds(endpoint, status=None), "moto's S3 server to start", timeout=30,
                   unless=lambda: process.poll() is not None)
        yield endpoint
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        process.terminate()
        process.wait(timeout=20)


def empty_prefix(bucket: str, prefix: str) -> None:
    """Delete every object under `prefix/` of `bucket`."""
    import boto3

    s3 = boto3.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        if objects := [{"Key": item["Key"]} for item in page.get("Contents", [])]:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
