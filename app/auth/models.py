"""Installation secrets (the generated admin password hash and JWT key) and failed logins,
shared by replicas."""

import uuid
from datetime import datetime

from sqlalchemy import Column, Index
from sqlmodel import Field, SQLModel

from app.db.types import UTCDateTime, metadata  # noqa: F401  (the naming convention comes first)


class InstallationSecret(SQLModel, table=True):
    """A value generated once per installation. Never exported in a snapshot."""

    __tablename__ = "installation_secrets"

    name: str = Field(primary_key=True, max_length=64)
    value: str


class LoginFailure(SQLModel, table=True):
    """One failed password check, against one subject: a username or a client address, each
    kept as a SHA-256 so that neither is stored. Kept for the throttling window only; never
    exported in a snapshot."""

    __tablename__ = "login_failures"
    __table_args__ = (Index("ix_login_failures_subject_failed_at", "subject", "failed_at"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    subject: str = Field(max_length=64)
    failed_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))
