"""Query parameters both Airflow versions' routes share: pages, times, and the parameters a
list honours or refuses."""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from fastapi import Depends, Query, Request
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from app.airflow.filters import bad_request

# The most entries one page holds, whatever `limit` asks (Airflow's `[api] maximum_page_limit`):
# a page of task instances costs queries per entry.
MAX_PAGE = 1000
MAX_OFFSET = 2**31 - 1


def _blank_is(default: int) -> BeforeValidator:
    """`?limit=` (airflowctl sends it when no --limit is given) reads as the default: a
    documented deviation, where Airflow answers 422."""
    return BeforeValidator(lambda value: default if value == "" else value)


def _at_most(most: int) -> AfterValidator:
    return AfterValidator(lambda value: min(value, most))


def _zero_is(default: int) -> AfterValidator:
    return AfterValidator(lambda value: default if value == 0 else value)


def limit(default: int) -> Any:
    """Airflow 3's page size: at least 0 (0 is an empty page), clamped to MAX_PAGE."""
    return Annotated[int, _blank_is(default), Field(ge=0), _at_most(MAX_PAGE)]


def limit_v1(default: int) -> Any:
    """Airflow 2.10's page size: 0 is the default page, more than MAX_PAGE is MAX_PAGE."""
    return Annotated[int, _blank_is(default), Field(ge=0), _zero_is(default), _at_most(MAX_PAGE)]


Offset = Annotated[int, _blank_is(0), Field(ge=0), _at_most(MAX_OFFSET)]


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# A time in a filter; one without an offset is UTC (Airflow's default time zone).
Moment = Annotated[datetime, AfterValidator(_utc)]


class ListQuery(BaseModel):
    """A list route's query parameters: each field one Airflow honours (a filters.Filter marks
    what it filters); `refused` names the rest of the Airflow version's parameters of that
    route, each with the reason fenceline refuses it. Parameters Airflow does not define are
    ignored, as Airflow ignores them."""

    refused: ClassVar[dict[str, str]] = {}


def refuse(request: Request, refused: dict[str, str]) -> None:
    """400 naming the first refused parameter the request carries."""
    for name in request.query_params:
        if name in refused:
            raise bad_request(f"{name}: {refused[name]}")


def honouring(model: type[ListQuery]) -> Any:
    """The route parameter that reads `model`'s query parameters, after refusing (400) any
    parameter `model.refused` names."""

    def read(request: Request, params: Annotated[model, Query()]) -> ListQuery:  # type: ignore[valid-type]
        refuse(request, model.refused)
        return params

    read.refused = model.refused  # type: ignore[attr-defined]  # read by the compatibility table's test
    return Annotated[model, Depends(read)]


def refusing(refused: dict[str, str]) -> Callable[[Request], None]:
    """A route dependency that refuses (400) the parameters `refused` names."""

    def check(request: Request) -> None:
        refuse(request, refused)

    check.refused = refused  # type: ignore[attr-defined]  # read by the compatibility table's test
    return check
