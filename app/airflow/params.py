"""Query parameters both Airflow versions' routes share."""

from typing import Annotated, Any

from fastapi import Query
from pydantic import BeforeValidator


def _blank_is(default: int) -> BeforeValidator:
    """`?limit=` (airflowctl sends it when no --limit is given) reads as the default: a
    documented deviation, where Airflow answers 422."""
    return BeforeValidator(lambda value: default if value == "" else value)


def limit(default: int) -> Any:
    """The page size of a list route; bounded, as a page of task instances costs queries per entry."""
    return Annotated[int, _blank_is(default), Query(ge=0, le=1000)]


Offset = Annotated[int, _blank_is(0), Query(ge=0, le=2**31 - 1)]
