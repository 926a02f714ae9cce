"""The settings of an app under test."""

import tempfile
from pathlib import Path
from typing import Any

from app.config import Settings
from tests.support.api import ADMIN_PASSWORD

# Log files and anything else the app keeps on disk go here, never into the working tree.
TEST_DATA_DIR = Path(tempfile.mkdtemp(prefix="fenceline-test-"))
JWT_SECRET = "test-jwt-secret-that-is-long-enough-for-hs256"


def app_settings(db_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url, "admin_password": ADMIN_PASSWORD, "jwt_secret": JWT_SECRET,
        # Tests sweep on demand (POST /v1/admin/reap) and re-place without waiting.
        "reaper_interval_seconds": 0, "infra_backoff_base_seconds": 0, "data_dir": TEST_DATA_DIR, **overrides,
    }
    return Settings(**values)
