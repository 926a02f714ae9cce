"""HTTP for seats and executions: parse, call one service function, map the result."""

import uuid
from typing import Annotated

from fastapi import Header, Path, Request, Response

from app.auth import tokens
from app.auth.deps import LauncherDep, OperatorDep, installation
from app.identity import service
from app.identity.schemas import (
    AdmissionPublic,
    AdmissionRequest,
    ExecutionConflict,
    ExecutionPatch,
    ExecutionPublic,
    ExecutionsPublic,
    OccupantsPublic,
    ResumeWrite,
    SeatName,
    SeatPublic,
    SeatPut,
    execution_public,
    seat_public,
)
from app.web.deps import SessionDep
from app.web.problems import problems, refusals
from app.web.routes import Router

router = Router(prefix="/v1", tags=["identity"], responses=problems(401, 403, 422))
SeatPath = Annotated[SeatName, Path(description="The seat's canonical name, e.g. etl-worker-3.")]
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=256)]


@router.post("/seats/{seat}/executions", status_code=201, response_model=AdmissionPublic,
             responses={200: {"model": AdmissionPublic, "description": "Idempotent replay"},
                        **refusals(ExecutionConflict)})
def admit_execution(
    seat: SeatPath, body: AdmissionRequest, session: SessionDep, request: Request, response: Response,
    _: LauncherDep, idempotency_key: IdempotencyKey = None,
) -> AdmissionPublic:
    """Admit a new execution of the seat before its runtime is created."""
    execution, created = service.admit(session=session, seat=seat, request=body, idempotency_key=idempotency_key)
    if not created:
        response.status_code = 200
    ttl = request.app.state.settings.worker_token_ttl_seconds
    token = tokens.mint_worker(installation(request).keyring, execution.execution_id, seat, ttl_seconds=ttl)
    return AdmissionPublic(**execution_public(execution).model_dump(), worker_token=token)


@router.get("/seats/{seat}/executions", responses=problems())
def list_seat_executions(seat: SeatPath, session: SessionDep, _: LauncherDep) -> ExecutionsPublic:
    """Every execution of the seat, ordered by generation."""
    return ExecutionsPublic(items=[execution_public(e) for e in service.seat_executions(session=session, seat=seat)])


@router.get("/executions/{execution_id}", responses=problems(404))
def read_execution(execution_id: uuid.UUID, session: SessionDep, _: LauncherDep) -> ExecutionPublic:
    return execution_public(service.get_execution(session=session, execution_id=execution_id))


@router.patch("/executions/{execution_id}", responses={**problems(404), **refusals(ExecutionConflict)})
def patch_execution(execution_id: uuid.UUID, body: ExecutionPatch, session: SessionDep,
                    _: LauncherDep) -> ExecutionPublic:
    """Bind pod_uid (once) and record the latest runtime observation."""
    return execution_public(service.update_execution(session=session, execution_id=execution_id, patch=body))


@router.get("/occupants")
def list_occupants(session: SessionDep, _: OperatorDep) -> OccupantsPublic:
    """The latest execution of every seat, from the execution history alone."""
    return OccupantsPublic(items=[execution_public(e) for e in service.occupants(session=session)])


@router.get("/seats/{seat}", responses=problems(404))
def read_seat(seat: SeatPath, session: SessionDep, _: OperatorDep) -> SeatPublic:
    return seat_public(*service.get_seat(session=session, seat=seat))


@router.put("/seats/{seat}", responses={201: {"model": SeatPublic}, **refusals(ExecutionConflict)})
def put_seat(seat: SeatPath, body: SeatPut, session: SessionDep, response: Response, _: OperatorDep) -> SeatPublic:
    """The plain writer, for a seat with no runtime identity and no execution history."""
    if service.put_seat(session=session, seat=seat, record=body):
        response.status_code = 201
    return seat_public(*service.get_seat(session=session, seat=seat))


@router.delete("/seats/{seat}", status_code=204, responses=problems(404))
def delete_seat(seat: SeatPath, session: SessionDep, _: OperatorDep) -> None:
    """Drop the seat projection; its execution history survives."""
    service.delete_seat(session=session, seat=seat)


@router.put("/seats/{seat}/resume", responses={**problems(404), **refusals(ExecutionConflict)})
def write_resume(seat: SeatPath, body: ResumeWrite, session: SessionDep, _: OperatorDep) -> SeatPublic:
    """Compare-and-swap the orchestrator-owned resume fields on the expected execution."""
    stored = service.write_resume(session=session, seat=seat, write=body)
    return seat_public(*service.get_seat(session=session, seat=stored.name))
