"""Liveness that proves the database answers."""

from fastapi import APIRouter
from sqlalchemy import text

from app.db import SessionDep
from app.errors import problems

router = APIRouter(tags=["operations"])


@router.get("/health", responses=problems(503))
def health(session: SessionDep) -> dict[str, str]:
    """200 when the service and its database answer (an unreachable database is a 503)."""
    session.execute(text("SELECT 1")).scalar_one()
    return {"status": "ok", "database": session.get_bind().dialect.name}
