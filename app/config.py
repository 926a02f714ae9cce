"""Settings, read from FENCELINE_* environment variables (and DATABASE_URL)."""

import ipaddress
import re
from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.db.dialect import with_driver


def log_store_name(value: str) -> str:
    """A log store's name as FENCELINE_LOG_STORE and `fenceline logs copy` take it."""
    if value in ("file", "database"):
        return value
    if value.startswith("s3://") and value[5:].strip("/"):
        try:
            import boto3  # noqa: F401  (the s3 extra: checked here so a start fails at once, not at a first log)
        except ModuleNotFoundError:
            raise ValueError("the s3 log store needs boto3, which this installation lacks: "
                             "pip install 'fenceline[s3]'") from None
        return value
    raise ValueError(f"a log store is file, database or s3://bucket[/prefix], not {value!r}")


# A trusted proxy named, not numbered: compared as it is with the peer's name (a Unix socket's,
# the test client's); a dotted name would need a DNS lookup nobody makes, so it is refused.
PEER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def proxy_entry(value: str) -> str:
    """A FENCELINE_TRUSTED_PROXIES entry: `*`, an IP address or network, or a peer's bare name."""
    if value == "*" or PEER_NAME.fullmatch(value):
        return value
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or network (like 10.0.0.1 or 10.0.0.0/8)") from None
    return value


def http_url(value: str) -> str:
    """An absolute http(s) URL with a host (FENCELINE_PUBLIC_URL)."""
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018  (raises ValueError for a port that is not one)
    except ValueError:
        raise ValueError(f"{value!r} has no valid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
    return value


def signing_key_algorithm(pem: str, *, public: bool = False) -> str:
    """EdDSA or ES256 for a PEM Ed25519 or ECDSA P-256 key (private, or public too if `public`);
    ValueError, without a word of the key, for anything else."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    try:
        if public and "PRIVATE KEY" not in pem:
            key = serialization.load_pem_public_key(pem.encode())
        else:
            key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError("not an unencrypted PEM key") from None
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return "EdDSA"
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return "ES256"
    raise ValueError("not an Ed25519 or ECDSA P-256 key")


def _agrees(algorithm: str, configured: str | None) -> None:
    if configured not in (None, "HS256", algorithm):  # HS256, the default, yields to a key given
        raise ValueError(f"the key signs {algorithm}, not FENCELINE_JWT_ALGORITHM={configured}")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FENCELINE_", extra="ignore")

    data_dir: Path = Path("data")
    # Accepts FENCELINE_DATABASE_URL or the conventional DATABASE_URL.
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("FENCELINE_DATABASE_URL", "DATABASE_URL")
    )

    # Where clients reach this server: the OpenAPI document's `servers` entry, the default base
    # URL of a client generated from it.
    public_url: str = "http://127.0.0.1:8000"

    # Database connections of one server process: the pool, the overflow beyond it, and how
    # long a request waits for a free connection before it is answered 503.
    database_pool_size: int = Field(default=10, ge=1)
    database_max_overflow: int = Field(default=20, ge=0)
    database_pool_timeout_seconds: float = Field(default=30.0, gt=0)
    # Allocations between two young collections of a served process's garbage collector
    # (Python's is 700): a batch's objects then die before a collection promotes them, and
    # full collections, which hold every request, come that much less often.
    gc_young_threshold: int = Field(default=20000, ge=700, le=1_000_000)
    # PostgreSQL connections kept free for other clients (psql, migrations, backups): `serve`
    # refuses to start processes whose pools, overflow and listeners could use them.
    database_connections_headroom: int = Field(default=10, ge=0)
    # How many servers (replicas, machines, compose services) share the database at most, a
    # rollout's surge included: each keeps to its share, (max_connections − headroom) / replicas.
    server_replicas: int = Field(default=1, ge=1)
    # At start, how long `serve` and `migrate` retry (with back-off) a database that does not
    # answer before they give up (exit 4).
    db_connect_timeout_seconds: float = Field(default=30.0, ge=0)

    # Log lines of the server (and the worker): plain text, or one JSON object per line.
    log_format: Literal["plain", "json"] = "plain"
    # OpenTelemetry traces (the `fenceline[otel]` extra): on when set, or when the standard
    # OTEL_EXPORTER_OTLP_ENDPOINT is (app/telemetry/tracing.py).
    otel: bool = False

    # Operator credentials. With no password configured, a fresh install generates one,
    # stores only its hash and prints it once.
    admin_username: str = "admin"
    admin_password: SecretStr | None = None

    # JWT signing: the active key id and secret; extra accepted keys for rotation as
    # {"kid": "secret"}. With no secret configured, one is generated and kept in the database
    # so that every replica on one database signs alike.
    jwt_kid: str = "k1"
    jwt_secret: SecretStr | None = None
    jwt_accepted_keys: dict[str, SecretStr] = {}
    # Asymmetric signing (contract 11.3, docs/fencing.md): an Ed25519 (EdDSA) or ECDSA P-256
    # (ES256) private key as PEM, given as a value or a file, signs every token instead, under its
    # RFC 7638 thumbprint as kid; with jwt_algorithm EdDSA or ES256 and no key, one is generated at
    # first start and kept in the database. The HS256 keys above stay accepted, and so do the
    # public keys of jwt_accepted_public_keys (PEM, rotated-out keys) until their tokens expire;
    # every accepted public key is served at /.well-known/jwks.json.
    jwt_algorithm: Literal["HS256", "EdDSA", "ES256"] = "HS256"
    jwt_signing_key: SecretStr | None = None
    jwt_signing_key_file: Path | None = None
    jwt_accepted_public_keys: list[str] = []
    operator_token_ttl_seconds: int = 3600
    worker_token_ttl_seconds: int = 7 * 24 * 3600
    # Launcher tokens admit and update executions, nothing else (for workers and launchers).
    launcher_token_ttl_seconds: int = 30 * 24 * 3600
    # Device tokens (app/auth/throttle.py): a client that logged in before is not slowed down
    # by others' failed logins for this long after its last login.
    device_token_ttl_seconds: int = Field(default=365 * 24 * 3600, ge=60)
    # Metrics tokens read /metrics and nothing else (for Prometheus, from a Secret).
    metrics_token_ttl_seconds: int = Field(default=365 * 24 * 3600, ge=60)
    attempt_token_ttl_seconds: int = 3600
    # Renewal keeps orig_iat; past this lifetime from it an attempt token is not renewed.
    max_attempt_credential_lifetime_seconds: int = 7 * 24 * 3600
    # Claim-less (legacy) attempt tokens: accepted under the epoch-0 rule, or refused (401).
    accept_legacy_attempt_tokens: bool = True
    # Proxies (addresses or networks) whose X-Forwarded-For names the client, for the login
    # throttle and the request log; with none, the peer's address is the client's.
    trusted_proxies: list[str] = []
    # Tokens minted before tokens named their issuer and audience: accepted this long after
    # their iat (0 refuses them at once).
    unscoped_token_grace_seconds: int = Field(default=7 * 24 * 3600, ge=0)

    # Outcome routing: infra re-places back off exponentially (with jitter) up to the cap.
    infra_backoff_base_seconds: float = 5.0
    infra_backoff_cap_seconds: float = 300.0

    # On SIGTERM, how long the requests in flight get to finish once the waiting claims were
    # answered (contract 10.3); what is still running then is cancelled.
    drain_grace_seconds: float = Field(default=20.0, ge=0)
    # The replica registry: each server process records that it is alive this often (contract 10.2).
    replica_heartbeat_seconds: float = Field(default=5.0, gt=0)
    # Reapers: a sweep every interval (0 disables the background sweep).
    reaper_interval_seconds: float = 10.0
    agent_lost_after_seconds: float = 120.0
    dispatch_lost_after_seconds: float = 600.0

    # Request heads (app/web/serving.py): the request line and headers in all (431 beyond), the
    # time a client has to finish them (the connection is closed after), and an idle keep-alive's.
    max_request_head_bytes: int = Field(default=64 * 1024, ge=4096, le=16 * 1024 * 1024)
    request_head_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    keep_alive_timeout_seconds: float = Field(default=5.0, gt=0, le=3600)
    # Request bodies, bounded before they are parsed (413 beyond): every route's, and the three
    # that carry more once the caller's token allows them (log appends: log_max_request_bytes).
    max_request_bytes: int = Field(default=1024 * 1024, ge=1024)
    # The time a body has to arrive after its head, one second more per 64 KiB that arrived
    # (a steady large upload goes on): 408 and the connection closed after (app/web/ingress.py).
    request_body_timeout_seconds: float = Field(default=20.0, gt=0, le=3600)
    run_max_request_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    snapshot_max_request_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)
    # JSON nesting (422 beyond): a whole body, and a free-form field (a run's conf) counted
    # from the field itself, so that a snapshot wrapping a conf at its limit still restores.
    max_json_depth: int = Field(default=64, ge=8, le=256)
    max_free_form_depth: int = Field(default=32, ge=1, le=128)

    # Attempt logs: the store (`file`, `database` or `s3://bucket/prefix`; unset: file on SQLite,
    # database on PostgreSQL unless the log directory still holds logs — app/logs/stores/__init__.py),
    # the file store's directory, how long an S3 call may take, limits per append request and
    # per attempt stream, and how many days after its run ended a log is kept (unset: forever).
    log_store: str | None = None
    log_dir: Path | None = None
    log_store_timeout_seconds: float = Field(default=10.0, gt=0)
    log_max_request_bytes: int = 1024 * 1024
    log_max_attempt_bytes: int = 1024 * 1024 * 1024
    log_retention_days: float | None = Field(default=None, gt=0)
    # History (app/admin/clean.py): finished runs that ended more than this many days ago are
    # deleted with their task instances, history, attempt records and logs, a few runs per
    # reaper sweep, as `fenceline db clean` does by hand (unset: kept until an operator cleans).
    history_retention_days: float | None = Field(default=None, gt=0)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: list[str]) -> list[str]:
        return [proxy_entry(entry) for entry in value]

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("log_store")
    @classmethod
    def _known_store(cls, value: str | None) -> str | None:
        return None if value is None else log_store_name(value)

    @field_validator("jwt_signing_key")
    @classmethod
    def _signing_key(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None:
            _agrees(signing_key_algorithm(value.get_secret_value()), info.data.get("jwt_algorithm"))
        return value

    @field_validator("jwt_signing_key_file")
    @classmethod
    def _signing_key_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is not None:
            if info.data.get("jwt_signing_key") is not None:
                raise ValueError("give the signing key as a value or as a file, not both")
            try:
                pem = value.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
            _agrees(signing_key_algorithm(pem), info.data.get("jwt_algorithm"))
        return value

    @field_validator("jwt_accepted_public_keys")
    @classmethod
    def _public_keys(cls, value: list[str]) -> list[str]:
        for pem in value:
            signing_key_algorithm(pem, public=True)
        return value

    @property
    def signing_key_pem(self) -> str | None:
        """The asymmetric signing key's PEM, from the value or the file; None for HS256."""
        if self.jwt_signing_key is not None:
            return self.jwt_signing_key.get_secret_value()
        return self.jwt_signing_key_file.read_text() if self.jwt_signing_key_file is not None else None

    @property
    def resolved_log_dir(self) -> Path:
        return self.log_dir or self.data_dir / "logs"

    @property
    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL: the SQLite file under data_dir unless one is configured."""
        return with_driver(self.database_url or f"sqlite:///{(self.data_dir / 'fenceline.db').resolve()}")


@lru_cache
def get_settings() -> Settings:
    return Settings()
