"""Installation secrets: the generated admin password hash and JWT key, shared by replicas."""

from sqlmodel import Field, SQLModel

from app.db import metadata  # noqa: F401  (the naming convention comes first)


class InstallationSecret(SQLModel, table=True):
    """A value generated once per installation. Never exported in a snapshot."""

    __tablename__ = "installation_secrets"

    name: str = Field(primary_key=True, max_length=64)
    value: str
