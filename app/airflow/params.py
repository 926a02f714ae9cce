"""Query parameters both Airflow versions' routes share."""

from typing import Annotated

from fastapi import Query

# Paging bounds for both Airflow versions: a page of task instances costs queries per entry.
Limit = Annotated[int, Query(ge=0, le=1000)]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1)]
