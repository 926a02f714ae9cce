"""Every table module, imported in one place so that Alembic and the snapshot see them all."""

from app.auth.models import InstallationSecret, LoginFailure
from app.execution.models import TaskAttempt
from app.fleet.models import Replica, SchemaWindow
from app.identity.models import Execution, Seat
from app.logs.models import LogChunk, LogRemoval
from app.orchestration.models import DagRun, TaskInstance, TaskInstanceHistory
from app.routing.models import Pool, Tenant

__all__ = ["DagRun", "Execution", "InstallationSecret", "LogChunk", "LogRemoval", "LoginFailure", "Pool", "Replica",
           "SchemaWindow", "Seat", "TaskAttempt", "TaskInstance", "TaskInstanceHistory", "Tenant"]
