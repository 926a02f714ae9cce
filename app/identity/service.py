"""Execution admission and the launcher-owned writes.

Every state change is a compare-and-swap; each docstring says what the loser of a race gets.
Every refusal is counted in execution_identity_conflicts_total{swarm,reason} and, raised as
an AppError, rolls the whole request back: a refusal grants nothing and changes nothing.
"""

import hashlib
import json
import uuid
from typing import Any

from sqlalchemy import exists, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from app.db.statements import upsert
from app.db.types import utcnow
from app.errors import AppError, conflict, not_found
from app.identity.models import Execution, Seat
from app.identity.schemas import AdmissionRequest, ExecutionPatch, ResumeWrite, SeatPut
from app.orchestration import events
from app.telemetry.metrics import execution_identity_conflicts, zeroed

TARGET_FIELDS = ("pod_namespace", "pod_name", "pod_uid", "server_id", "process_namespace", "pid")
# The reasons refusal() is given (execution_identity_conflicts_total's series of a swarm start at
# 0 from its first admission).
REFUSALS = ("admission-required", "execution-rotated", "idempotency-key-reused", "identity-conflict",
            "pod-uid-reused", "stale-predecessor", "stale-update")


def refusal(swarm: str, type: str, title: str, detail: str, **extra: Any) -> AppError:
    """A counted 409 of the identity domain."""
    execution_identity_conflicts.labels(swarm=swarm, reason=type).inc()
    return conflict(type, title, detail, **extra)


def get_execution(*, session: Session, execution_id: uuid.UUID) -> Execution:
    execution = session.get(Execution, execution_id)
    if execution is None:
        raise not_found("execution", f"No execution {execution_id}.")
    return execution


def current_execution(*, session: Session, seat: str) -> Execution | None:
    """The seat's latest execution, from the history alone."""
    return session.execute(
        select(Execution).where(Execution.seat == seat).order_by(Execution.generation.desc()).limit(1)
    ).scalars().first()


def _fingerprint(seat: str, request: AdmissionRequest) -> str:
    body = json.dumps({"seat": seat, **request.model_dump(mode="json")}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _replay(session: Session, seat: str, key: str | None, fingerprint: str, swarm: str) -> Execution | None:
    """The execution an earlier request with this Idempotency-Key created, if any; a counted
    409 idempotency-key-reused when that request was a different one."""
    if key is None:
        return None
    found = session.execute(
        select(Execution).where(Execution.seat == seat, Execution.idempotency_key == key)
    ).scalars().first()
    if found is not None and found.request_fingerprint != fingerprint:
        raise refusal(
            swarm, "idempotency-key-reused", "Idempotency key reused",
            "This Idempotency-Key was used for a different admission request.",
        )
    return found


def _stale_predecessor(session: Session, seat: str, request: AdmissionRequest) -> AppError:
    current = current_execution(session=session, seat=seat)
    return refusal(
        request.swarm, "stale-predecessor", "Stale predecessor",
        f"previous_execution_id {request.previous_execution_id} is not the current execution of seat {seat!r}.",
        current_execution_id=current.execution_id if current else None,
        current_generation=current.generation if current else 0,
    )


def _pod_uid_reused(session: Session, swarm: str, pod_uid: str, execution_id: uuid.UUID) -> AppError | None:
    owner = session.execute(select(Execution.execution_id).where(Execution.pod_uid == pod_uid)).scalars().first()
    if owner is None or owner == execution_id:
        return None
    return refusal(
        swarm, "pod-uid-reused", "Pod UID reused",
        f"pod_uid {pod_uid!r} was already recorded by execution {owner}.",
    )


def admit(
    *, session: Session, seat: str, request: AdmissionRequest, idempotency_key: str | None
) -> tuple[Execution, bool]:
    """Admit a new incarnation of `seat`; answers (execution, created).

    The predecessor is superseded by one guarded UPDATE, and `(seat, generation)` is unique:
    of two admissions naming the same predecessor exactly one wins, the other gets 409
    stale-predecessor naming the current execution. A request repeating an Idempotency-Key
    gets the execution it created back.
    """
    zeroed(execution_identity_conflicts, swarm=(request.swarm,), reason=REFUSALS)
    fingerprint = _fingerprint(seat, request)
    if (replayed := _replay(session, seat, idempotency_key, fingerprint, request.swarm)) is not None:
        return replayed, False
    now = utcnow()
    execution_id = uuid.uuid4()
    if request.previous_execution_id is None:
        generation = 1
    else:
        predecessor_generation = session.execute(
            update(Execution)
            .where(
                Execution.execution_id == request.previous_execution_id,
                Execution.seat == seat,
                Execution.superseded_by.is_(None),
            )
            .values(superseded_by=execution_id, updated_at=now)
            .returning(Execution.generation)
        ).scalar_one_or_none()
        if predecessor_generation is None:
            if (replayed := _replay(session, seat, idempotency_key, fingerprint, request.swarm)) is not None:
                return replayed, False
            raise _stale_predecessor(session, seat, request)
        events.announce_stale(session, request.previous_execution_id)
        generation = predecessor_generation + 1
    target = request.runtime_target or {}
    if target.get("pod_uid") and (err := _pod_uid_reused(session, request.swarm, target["pod_uid"], execution_id)):
        raise err
    execution = Execution(
        execution_id=execution_id, seat=seat, swarm=request.swarm, role=request.role,
        labels=request.labels, generation=generation,
        previous_execution_id=request.previous_execution_id,
        runtime_backend=request.runtime_backend, has_target=request.runtime_target is not None,
        **{f: target.get(f) for f in TARGET_FIELDS},
        idempotency_key=idempotency_key, request_fingerprint=fingerprint, created_at=now, updated_at=now,
    )
    try:
        with session.begin_nested():
            session.add(execution)
    except IntegrityError:
        # A concurrent admission took this generation (or this key, or this pod UID).
        if (replayed := _replay(session, seat, idempotency_key, fingerprint, request.swarm)) is not None:
            return replayed, False
        if target.get("pod_uid") and (err := _pod_uid_reused(session, request.swarm, target["pod_uid"], execution_id)):
            raise err from None
        raise _stale_predecessor(session, seat, request) from None
    record = {"swarm": request.swarm, "role": request.role, "labels": request.labels}
    upsert(
        session, Seat,
        {"name": seat, **record, "current_execution_id": execution_id, "created_at": now, "updated_at": now},
        ["name"], {**record, "current_execution_id": execution_id, "updated_at": now},
    )
    return execution, True


def _immutable_mismatch(execution: Execution, patch: ExecutionPatch) -> str | None:
    """The first immutable field that `patch` repeats with a different value."""
    given = patch.model_dump(exclude_unset=True, exclude={"pod_uid", "observation", "runtime_target"})
    for name, value in given.items():
        if getattr(execution, name) != value:
            return name
    for name, value in (patch.runtime_target or {}).items():
        if name not in TARGET_FIELDS:
            return f"runtime_target.{name}"
        if name == "pod_uid" and execution.pod_uid is None and patch.pod_uid in (None, value):
            continue  # binding it through the target is the same as binding pod_uid
        if getattr(execution, name) != value:
            return f"runtime_target.{name}"
    return None


def update_execution(*, session: Session, execution_id: uuid.UUID, patch: ExecutionPatch) -> Execution:
    """Bind pod_uid once and record the latest observation.

    Each write is guarded on the execution still being current (superseded_by IS NULL), and
    the binding on pod_uid still being unbound: of two binders of different UIDs exactly one
    wins, the other gets identity-conflict. An observation older than the stored one is
    ignored (the latest observation wins, whatever order they arrive in).
    """
    execution = get_execution(session=session, execution_id=execution_id)
    swarm = execution.swarm

    def stale() -> AppError:
        return refusal(
            swarm, "stale-update", "Stale update",
            f"Execution {execution_id} was superseded by {execution.superseded_by}.",
            current_execution_id=execution.superseded_by,
        )

    def identity_conflict(detail: str) -> AppError:
        return refusal(swarm, "identity-conflict", "Identity conflict", detail)

    def bound_already() -> AppError:
        return identity_conflict(f"Execution {execution_id} is already bound to pod_uid {execution.pod_uid!r}.")

    if execution.superseded_by is not None:
        raise stale()
    if (field := _immutable_mismatch(execution, patch)) is not None:
        raise identity_conflict(f"{field} is immutable once admitted.")
    pod_uid = patch.pod_uid or (patch.runtime_target or {}).get("pod_uid")
    now = utcnow()
    if pod_uid is not None and execution.pod_uid != pod_uid:
        if execution.runtime_backend != "kubernetes":
            raise identity_conflict("Only a kubernetes execution binds a pod_uid.")
        if execution.pod_uid is not None:
            raise bound_already()
        if err := _pod_uid_reused(session, swarm, pod_uid, execution_id):
            raise err
        try:
            with session.begin_nested():
                bound = session.execute(
                    update(Execution)
                    .where(Execution.execution_id == execution_id, Execution.pod_uid.is_(None),
                           Execution.superseded_by.is_(None))
                    .values(pod_uid=pod_uid, has_target=True, updated_at=now)
                    .returning(Execution.execution_id)
                ).scalar_one_or_none()
        except IntegrityError:
            raise _pod_uid_reused(session, swarm, pod_uid, execution_id) from None
        if bound is None:
            session.refresh(execution)
            if execution.superseded_by is not None:
                raise stale()
            if execution.pod_uid != pod_uid:
                raise bound_already()
    if (obs := patch.observation) is not None:
        recorded = session.execute(
            update(Execution)
            .where(Execution.execution_id == execution_id, Execution.superseded_by.is_(None))
            .where((Execution.obs_observed_at.is_(None)) | (Execution.obs_observed_at <= obs.observed_at))
            .values(obs_phase=obs.phase, obs_reason=obs.reason, obs_exit_code=obs.exit_code,
                    obs_terminal=obs.terminal, obs_observed_at=obs.observed_at, updated_at=now)
            .returning(Execution.execution_id)
        ).scalar_one_or_none()
        if recorded is None:
            session.refresh(execution)
            if execution.superseded_by is not None:
                raise stale()
        elif obs.terminal:
            events.announce_stale(session, execution_id)
    session.refresh(execution)
    return execution


def seat_executions(*, session: Session, seat: str) -> list[Execution]:
    query = select(Execution).where(Execution.seat == seat).order_by(Execution.generation)
    return list(session.execute(query).scalars())


def occupants(*, session: Session) -> list[Execution]:
    """The latest execution of every seat, reconstructed from the execution history alone."""
    latest = (
        select(Execution.seat, func.max(Execution.generation).label("generation"))
        .group_by(Execution.seat)
        .subquery()
    )
    return list(session.execute(
        select(Execution)
        .join(latest, (Execution.seat == latest.c.seat) & (Execution.generation == latest.c.generation))
        .order_by(Execution.seat)
    ).scalars())


def get_seat(*, session: Session, seat: str) -> tuple[Seat, Execution | None]:
    """The seat projection and its current execution, read by one statement (one snapshot)."""
    row = session.execute(
        select(Seat, Execution)
        .outerjoin(Execution, Execution.execution_id == Seat.current_execution_id)
        .where(Seat.name == seat)
    ).first()
    if row is None:
        raise not_found("seat", f"No seat {seat!r}.")
    return row[0], row[1]


def put_seat(*, session: Session, seat: str, record: SeatPut) -> bool:
    """The plain writer; answers True if it created the seat.

    Allowed only for default identity metadata (local, no target) on a name with no execution
    history. The write is guarded on the stored row having no admitted execution, so a plain
    write racing an admission never overwrites admitted identity: the loser gets 409
    admission-required.
    """
    def admission_required(detail: str) -> AppError:
        return refusal(record.swarm, "admission-required", "Admission required", detail)

    if record.runtime_backend != "local" or record.runtime_target is not None:
        raise admission_required(
            "A seat with runtime identity is created by admission (POST /v1/seats/{seat}/executions).")
    if session.execute(select(exists().where(Execution.seat == seat))).scalar():
        raise admission_required(f"Seat {seat!r} has execution history; its record is written by admission.")
    existed = session.get(Seat, seat) is not None
    now = utcnow()
    values = {"swarm": record.swarm, "role": record.role, "labels": record.labels, "updated_at": now}
    written = upsert(
        session, Seat, {"name": seat, **values, "created_at": now}, ["name"], values,
        where=Seat.current_execution_id.is_(None),
    )
    if not written:
        raise admission_required(f"Seat {seat!r} was admitted concurrently; its record is written by admission.")
    return not existed


def delete_seat(*, session: Session, seat: str) -> None:
    """Drop the projection; the execution history survives."""
    found = session.get(Seat, seat)
    if found is None:
        raise not_found("seat", f"No seat {seat!r}.")
    session.delete(found)


def write_resume(*, session: Session, seat: str, write: ResumeWrite) -> Seat:
    """Compare-and-swap of the orchestrator-owned fields on `expected_execution_id`.

    A rotation that lands first makes this a 409 execution-rotated and leaves the stored token
    untouched; a rotation that lands after it finds the write already done.
    """
    values = write.model_dump(exclude_unset=True, exclude={"expected_execution_id"})
    stored = session.execute(
        update(Seat)
        .where(Seat.name == seat, Seat.current_execution_id == write.expected_execution_id)
        .values(**values, updated_at=utcnow())
        .returning(Seat.name)
    ).scalar_one_or_none()
    found = session.get(Seat, seat)
    if found is None:
        raise not_found("seat", f"No seat {seat!r}.")
    if stored is None:
        raise refusal(
            found.swarm, "execution-rotated", "Execution rotated",
            f"Seat {seat!r} is now filled by execution {found.current_execution_id}, "
            f"not {write.expected_execution_id}.",
            current_execution_id=found.current_execution_id,
        )
    session.refresh(found)
    return found
