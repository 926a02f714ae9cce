"""The settings of an app under test."""

import tempfile
from pathlib import Path
from typing import Any

from app.config import Settings
from tests.support.api import ADMIN_PASSWORD

# Log files and anything else the app keeps on disk go here, never into the working tree.
TEST_DATA_DIR = Path(tempfile.mkdtemp(prefix="fenceline-test-"))
JWT_SECRET = "test-jwt-secret-that-is-long-enough-for-hs256"
# What every server under test is given, in a thread or as `fenceline serve` (tests and bench/):
# the operator's password, the signing secret, and no reaper on a clock (sweeps are asked for).
SERVED = {"admin_password": ADMIN_PASSWORD, "jwt_secret": JWT_SECRET, "reaper_interval_seconds": 0}


def app_settings(db_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url, **SERVED,
        # Tests re-place without waiting.
        "infra_backoff_base_seconds": 0, "data_dir": TEST_DATA_DIR, **overrides,
    }
    return Settings(**values)


def served_env(**settings: Any) -> dict[str, str]:
    """SERVED and `settings` as the environment variables a `fenceline serve` child reads."""
    return {f"FENCELINE_{name.upper()}": str(value) for name, value in {**SERVED, **settings}.items()}
