"""Operator administration endpoints."""

from typing import Any

from fastapi.responses import JSONResponse

from app.admin import snapshot
from app.auth.deps import OperatorDep
from app.db.types import utcnow
from app.fleet import replicas
from app.fleet.schemas import ReplicaPublic, ReplicasPublic
from app.web.deps import JSON_OBJECT_BODY, JsonObjectDep, SessionDep
from app.web.problems import problems
from app.web.routes import Router

router = Router(prefix="/v1/admin", tags=["admin"], responses=problems(401, 403))


# Sent as it is read, not through the response model: a run stored before nesting was
# bounded may nest deeper than the model's serializer goes, and must still export.
@router.get("/snapshot", response_model=dict[str, Any])
def export_snapshot(session: SessionDep, _: OperatorDep) -> JSONResponse:
    """Seats, every generation of every execution, task state and history, as one document."""
    return JSONResponse(snapshot.export(session=session))


# The body is the one the ingress parsed off the event loop (a snapshot may be a gigabyte), once
# the operator's token was seen: never parsed again.
@router.post("/snapshot", status_code=201, responses=problems(409, 422), openapi_extra=JSON_OBJECT_BODY)
def restore_snapshot(session: SessionDep, _: OperatorDep, document: JsonObjectDep) -> dict[str, Any]:
    """Restore an exported document into an empty database."""
    return {"restored": snapshot.restore(session=session, document=document)}


@router.get("/replicas")
def list_replicas(session: SessionDep, _: OperatorDep) -> ReplicasPublic:
    """The server processes serving this database (contract 10.2): version, migrations' head,
    start and heartbeat; long-gone ones are forgotten after an hour."""
    now, found = utcnow(), replicas.listing(session=session)
    items = [ReplicaPublic(**r.model_dump(), alive=replicas.alive(r, now)) for r in found]
    return ReplicasPublic(items=items, total_entries=len(items))
