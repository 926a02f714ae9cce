"""Prometheus metrics, served at /metrics."""

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest

from app.auth.deps import OperatorOrBasicDep

execution_identity_conflicts = Counter(
    "execution_identity_conflicts",
    "Refusals of execution admission, binding and seat writes, by swarm and reason.",
    ["swarm", "reason"],
)

router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(_: OperatorOrBasicDep) -> Response:
    """Prometheus text exposition (operator bearer token or HTTP Basic)."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
