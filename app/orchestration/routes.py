"""The routes a task names (contract 2.9): its queue, its pool and its priority, and their
defaults. Routing owns the pools; the check that a run's pools exist and are large enough is
its own, handed to create_run by the caller (`RouteCheck`)."""

from collections.abc import Callable
from typing import Annotated

from pydantic import Field, StringConstraints

# Queue and pool names appear in URLs and on the dashboard: the identifiers' alphabet.
RouteName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,249}$")]
PriorityWeight = Annotated[int, Field(ge=-1_000_000, le=1_000_000, strict=True)]  # strict: `false` is no weight
DEFAULT_POOL = "default_pool"  # Airflow's default
DEFAULT_QUEUE = "default"

# check(session=…, wanted={pool: the most slots one task asks of it}) raises the refusal (422
# unknown-pool or pool-too-small) when a pool does not exist or has fewer slots.
RouteCheck = Callable[..., None]
