"""Operations endpoints: health (proving the database answers) and Prometheus metrics."""

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from app.auth.deps import OperatorOrBasicDep
from app.deps import SessionDep
from app.problems import problems

router = APIRouter(tags=["operations"])


@router.get("/health", responses=problems(503))
def health(session: SessionDep) -> dict[str, str]:
    """200 when the service and its database answer (an unreachable database is a 503)."""
    session.execute(text("SELECT 1")).scalar_one()
    return {"status": "ok", "database": session.get_bind().dialect.name}


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}, **problems(401)})
def metrics(_: OperatorOrBasicDep) -> Response:
    """Prometheus text exposition (operator bearer token or HTTP Basic)."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
