"""Every table module, imported in one place so that Alembic and the snapshot see them all."""

from app.auth.models import InstallationSecret
from app.identity.models import Execution, Seat

__all__ = ["Execution", "InstallationSecret", "Seat"]
