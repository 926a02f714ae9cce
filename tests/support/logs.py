"""The log stores every log test runs against (tests/logs/conftest.py): file, database and S3
(moto's server standing in for the bucket)."""

STORES = ["file", "database", "s3"]
