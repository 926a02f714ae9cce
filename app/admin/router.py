"""Operator administration endpoints."""

from typing import Annotated, Any

from fastapi import APIRouter, Body

from app.admin import snapshot
from app.auth.deps import OperatorDep
from app.deps import SessionDep
from app.problems import problems

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=problems(401, 403))


@router.get("/snapshot")
def export_snapshot(session: SessionDep, _: OperatorDep) -> dict[str, Any]:
    """Seats, every generation of every execution, task state and history, as one document."""
    return snapshot.export(session=session)


@router.post("/snapshot", status_code=201, responses=problems(409, 422))
def restore_snapshot(session: SessionDep, _: OperatorDep,
                     document: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    """Restore an exported document into an empty database."""
    return {"restored": snapshot.restore(session=session, document=document)}
