"""What each Airflow list route takes: its query parameters (or batch body), each marked with
what it filters, and the rest of the Airflow version's parameters with the reason fenceline
refuses them (docs/airflow-compat.md has the table). The SQL behind the markers is
app/airflow/listing.py's."""

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, ConfigDict, create_model
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from app.airflow.filters import Always, AnyOf, Equals, Flag, Like, Never, Prefix, Range, bad_request
from app.airflow.params import ListQuery, Moment, Offset, limit, limit_v1
from app.airflow.service import native_states
from app.web.schemas import Strict

OPS = {"gte": ">=", "gt": ">", "lte": "<=", "lt": "<"}
V1_OPS = ("gte", "lte")
V1_RENAME = {"execution_date": "logical_date"}


def ranges(*fields: str, ops: tuple[str, ...] = tuple(OPS)) -> Any:
    """A model of the range filters `{field}_{op}` on times (Airflow 2's execution_date bounds
    the logical date)."""
    definitions: dict[str, Any] = {
        f"{f}_{op}": (Annotated[Moment | None, Range(V1_RENAME.get(f, f), OPS[op])], None)
        for f in fields for op in ops}
    return create_model(f"Ranges_{'_'.join(fields)}", __base__=ListQuery, **definitions)


def patterns(**stems: str) -> Any:
    """A model of Airflow 3's pattern pairs: `{stem}_pattern` and `{stem}_prefix_pattern` on the
    shown field each stem names (`pool_name="pool"`)."""
    definitions: dict[str, Any] = {}
    for stem, field in stems.items():
        definitions[f"{stem}_pattern"] = (Annotated[str | None, Like(field)], None)
        definitions[f"{stem}_prefix_pattern"] = (Annotated[str | None, Prefix(field)], None)
    return create_model(f"Patterns_{'_'.join(stems)}", __base__=ListQuery, **definitions)


def _refused_ranges(field: str, reason: str, ops: tuple[str, ...] = tuple(OPS)) -> dict[str, str]:
    return {f"{field}_{op}": reason for op in ops}


NO_DURATION = "fenceline does not filter by duration (the duration is worked out per answer)"
NO_CURSOR = "fenceline pages with offset and limit; it hands out no cursors"
NO_CONF_SEARCH = "fenceline does not search run configurations"
BY_RUNS = "filter the runs instead (GET /api/v2/dags/~/dagRuns with state and date filters)"
# airflowctl's `dagrun list --start-date/--end-date` send these; Airflow defines no such parameter.
NOT_AIRFLOWS = ("not a parameter of Airflow's API, which ignores it; bound the runs with start_date_gte, "
                "end_date_lte, ...")

# Airflow 3's enums as its filters take them; "none" (and "no_status") ask for no state.
TIState = Literal["removed", "scheduled", "queued", "running", "success", "restarting", "failed", "up_for_retry",
                  "up_for_reschedule", "upstream_failed", "skipped", "deferred", "awaiting_input", "none",
                  "no_status"]
RunState = Literal["queued", "running", "success", "failed", "none"]


def enum_v1(*values: str) -> Any:
    """One of Airflow 2.10's enum `values`: another is refused (400) in connexion's words, naming it."""
    def check(value: Any) -> Any:
        if value not in values:
            raise PydanticCustomError("enum", "'{value}' is not one of {allowed}",
                                      {"value": str(value), "allowed": list(values)})
        return value
    return Annotated[Literal[values], BeforeValidator(check)]  # type: ignore[valid-type]


# Airflow 2.10's enums: an unknown value is refused, not answered with nothing.
TIStateV1 = enum_v1("success", "running", "failed", "upstream_failed", "skipped", "up_for_retry", "up_for_reschedule",
                    "queued", "none", "scheduled", "deferred", "removed", "restarting")
RunStateV1 = enum_v1("queued", "running", "success", "failed")
RunType = Literal["backfill", "scheduled", "manual", "operator_triggered", "asset_triggered",
                  "asset_materialization", "none"]
Limit, Limit100, LimitV1 = limit(50), limit(100), limit_v1(100)
TI_STATE = AnyOf("state", translate=native_states)


def _none_is_null(value: str) -> list[str | None]:
    return [None if value == "none" else value]


# --- /api/v2 (Airflow 3) ---------------------------------------------------------------------

class DagsQuery(patterns(dag_id="dag_id", dag_display_name="dag_display_name")):
    limit: Limit = 50
    offset: Offset = 0
    order_by: list[str] = ["dag_id"]
    tags: Annotated[list[str], Never("tags")] = []
    tags_match_mode: Annotated[Literal["any", "all"] | None, Always("tags")] = None
    owners: Annotated[list[str], Never("owners")] = []
    exclude_stale: Annotated[bool, Always("is_stale")] = True
    paused: Annotated[bool | None, Flag("is_paused", False)] = None
    has_import_errors: Annotated[bool | None, Flag("has_import_errors", False)] = None
    is_favorite: Annotated[bool | None, Flag("is_favorite", False)] = None
    has_asset_schedule: Annotated[bool | None, Flag("has_asset_schedule", False)] = None
    asset_dependency: Annotated[str | None, Like("asset_dependency")] = None
    bundle_name: Annotated[str | None, Equals("bundle_name")] = None
    bundle_version: Annotated[str | None, Equals("bundle_version")] = None
    timetable_type: Annotated[list[str], AnyOf("timetable_type")] = []

    refused: ClassVar[dict[str, str]] = {
        "dag_run_state": BY_RUNS, "last_dag_run_state": BY_RUNS,
        **_refused_ranges("dag_run_start_date", BY_RUNS), **_refused_ranges("dag_run_end_date", BY_RUNS)}


class DagRunsQuery(ranges("run_after", "logical_date", "start_date", "end_date", "updated_at"),
                   patterns(run_id="run_id", dag_id="dag_id", triggering_user_name="triggering_user_name",
                            partition_key="partition_key")):
    limit: Limit = 50
    offset: Offset = 0
    order_by: list[str] = ["id"]
    state: Annotated[list[RunState], AnyOf("state", translate=_none_is_null)] = []
    run_type: Annotated[list[RunType], AnyOf("run_type", translate=_none_is_null)] = []
    dag_version: Annotated[list[int], AnyOf("dag_version")] = []
    bundle_version: Annotated[str | None, Equals("bundle_version")] = None
    consuming_asset_pattern: Annotated[str | None, Like("consuming_asset")] = None
    partition_date_gte: Annotated[Moment | None, Range("partition_date", ">=")] = None
    partition_date_lte: Annotated[Moment | None, Range("partition_date", "<=")] = None

    refused: ClassVar[dict[str, str]] = {
        **_refused_ranges("duration", NO_DURATION), "cursor": NO_CURSOR, "conf_contains": NO_CONF_SEARCH,
        "start_date": NOT_AIRFLOWS, "end_date": NOT_AIRFLOWS}


class MappedTaskInstancesQuery(ranges("run_after", "logical_date", "start_date", "end_date", "updated_at"),
                               patterns(pool_name="pool", queue_name="queue", operator_name="operator_name",
                                        rendered_map_index="rendered_map_index")):
    """A mapped task's instances (listMapped): the task instance list's parameters but those
    that pick the DAG, the run or the task."""

    limit: Limit = 50
    offset: Offset = 0
    order_by: list[str] = ["map_index"]
    state: Annotated[list[TIState], TI_STATE] = []
    pool: Annotated[list[str], AnyOf("pool")] = []
    queue: Annotated[list[str], AnyOf("queue")] = []
    executor: Annotated[list[str], AnyOf("executor")] = []
    version_number: Annotated[list[int], AnyOf("version_number")] = []
    try_number: Annotated[list[int], AnyOf("try_number")] = []
    map_index: Annotated[list[int], AnyOf("map_index")] = []
    operator: Annotated[list[str], AnyOf("operator")] = []

    refused: ClassVar[dict[str, str]] = _refused_ranges("duration", NO_DURATION)


class TaskInstancesQuery(MappedTaskInstancesQuery, patterns(task_display_name="task_display_name", dag_id="dag_id",
                                                            run_id="run_id")):
    task_id: Annotated[str | None, Equals("task_id")] = None

    refused: ClassVar[dict[str, str]] = {
        **MappedTaskInstancesQuery.refused, "cursor": NO_CURSOR,
        "task_group_id": "fenceline keeps no DAG files, so no task groups"}


class PoolsQuery(patterns(pool_name="name")):
    limit: Limit = 50
    offset: Offset = 0
    order_by: list[str] = ["id"]


class JobsQuery(ranges("start_date", "end_date")):
    """fenceline runs no jobs: every filter of the empty list is exact; order_by is checked."""

    limit: Limit = 50
    offset: Offset = 0
    order_by: list[str] = ["id"]
    is_alive: bool | None = None
    job_state: str | None = None
    job_type: str | None = None
    hostname: str | None = None
    executor_class: str | None = None


class BatchBody(Strict):
    """A batch read's body: unknown members are refused (422) as Airflow refuses them; those
    Airflow defines that fenceline does not honour (`refused`) with 400."""

    refused: ClassVar[dict[str, str]] = {}

    def refuse(self) -> None:
        for name, reason in self.refused.items():
            if getattr(self, name, None) is not None:
                raise bad_request(f"{name}: {reason}")


def _batch(name: str, *fields: str, ops: tuple[str, ...] = tuple(OPS), **members: Any) -> Any:
    """A batch body model: range members on `fields` (Airflow 2's execution_date bounds the
    logical date), and `members` (name=(type, default))."""
    definitions = {f"{f}_{op}": (Annotated[Moment | None, Range(V1_RENAME.get(f, f), OPS[op])], None)
                   for f in fields for op in ops}
    return create_model(name, __base__=BatchBody, **definitions, **members)


Unread = SkipJsonSchema[Any]  # a member Airflow defines and fenceline refuses: kept out of the document
_UNREAD_DURATION = {f"duration_{op}": (Unread, None) for op in OPS}
_UNREAD_DURATION_V1 = {f"duration_{op}": (Unread, None) for op in V1_OPS}


# The members of a task-instance batch body both versions share (each adds its `state`).
TI_BATCH = {name: (Annotated[list[str] | None, AnyOf(field)], None) for name, field in (
    ("dag_ids", "dag_id"), ("dag_run_ids", "run_id"), ("task_ids", "task_id"), ("pool", "pool"), ("queue", "queue"),
    ("executor", "executor"))}


class TaskInstancesBatchBody(_batch("TaskInstancesBatchBodyBase", "run_after", "logical_date", "start_date",
                                    "end_date", **_UNREAD_DURATION, **TI_BATCH)):
    model_config = ConfigDict(title="TaskInstancesBatchBody")
    state: Annotated[list[TIState | None] | None, TI_STATE] = None
    order_by: str | None = None
    page_offset: Offset = 0
    page_limit: Limit100 = 100

    refused: ClassVar[dict[str, str]] = _refused_ranges("duration", NO_DURATION)


class DAGRunsBatchBody(_batch(
        "DAGRunsBatchBodyBase", "run_after", "logical_date", "start_date", "end_date", **_UNREAD_DURATION,
        conf_contains=(Unread, None))):
    model_config = ConfigDict(title="DAGRunsBatchBody")
    dag_ids: Annotated[list[str] | None, AnyOf("dag_id")] = None
    states: Annotated[list[RunState | None] | None, AnyOf("state", translate=_none_is_null)] = None
    order_by: str | None = None
    page_offset: Offset = 0
    page_limit: Limit100 = 100

    refused: ClassVar[dict[str, str]] = {**_refused_ranges("duration", NO_DURATION), "conf_contains": NO_CONF_SEARCH}


# --- /api/v1 (Airflow 2.10) ------------------------------------------------------------------

NO_FIELDS = "fenceline answers every field (pick the ones you need from the answer)"


class DagsQueryV1(ListQuery):
    limit: LimitV1 = 100
    offset: Offset = 0
    order_by: str = "dag_id"
    tags: Annotated[list[str], Never("tags")] = []
    only_active: Annotated[bool, Always("is_active")] = True
    paused: Annotated[bool | None, Flag("is_paused", False)] = None
    dag_id_pattern: Annotated[str | None, Like("dag_id")] = None

    refused: ClassVar[dict[str, str]] = {"fields": NO_FIELDS}


class DagRunsQueryV1(ranges("execution_date", "start_date", "end_date", "updated_at", ops=V1_OPS)):
    limit: LimitV1 = 100
    offset: Offset = 0
    order_by: str = "id"
    state: Annotated[list[RunStateV1], AnyOf("state")] = []

    refused: ClassVar[dict[str, str]] = {"fields": NO_FIELDS}


class TaskInstancesQueryV1(ranges("execution_date", "start_date", "end_date", "updated_at", ops=V1_OPS)):
    limit: LimitV1 = 100
    offset: Offset = 0
    state: Annotated[list[TIStateV1], TI_STATE] = []
    pool: Annotated[list[str], AnyOf("pool")] = []
    queue: Annotated[list[str], AnyOf("queue")] = []
    executor: Annotated[list[str], AnyOf("executor")] = []

    refused: ClassVar[dict[str, str]] = _refused_ranges("duration", NO_DURATION, V1_OPS)


class TriesQueryV1(ListQuery):
    limit: LimitV1 = 100
    offset: Offset = 0
    order_by: str = "try_number"


class PoolsQueryV1(ListQuery):
    limit: LimitV1 = 100
    offset: Offset = 0
    order_by: str = "id"


class TasksQueryV1(ListQuery):
    order_by: str = "task_id"


TasksQuery = TasksQueryV1  # Airflow 3's task list takes the same one parameter


class MappedTaskInstancesQueryV1(TaskInstancesQueryV1):
    order_by: str = "map_index"


class TaskInstancesBatchBodyV1(_batch("ListTaskInstanceFormBase", "execution_date", "start_date", "end_date",
                                      ops=V1_OPS, **_UNREAD_DURATION_V1, **TI_BATCH)):
    model_config = ConfigDict(title="ListTaskInstanceForm")
    state: Annotated[list[str | None] | None, TI_STATE] = None

    refused: ClassVar[dict[str, str]] = _refused_ranges("duration", NO_DURATION, V1_OPS)


class DagRunsBatchBodyV1(_batch("ListDagRunsFormBase", "execution_date", "start_date", "end_date", ops=V1_OPS)):
    model_config = ConfigDict(title="ListDagRunsForm")
    dag_ids: Annotated[list[str] | None, AnyOf("dag_id")] = None
    states: Annotated[list[str] | None, AnyOf("state")] = None
    order_by: str = "id"
    page_offset: Offset = 0
    page_limit: LimitV1 = 100
