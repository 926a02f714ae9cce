"""The application factory: routers, error handlers and the lifespan."""

import asyncio
import gc
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import Engine
from sqlmodel import Session
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import __version__, models  # noqa: F401  (registers every table)
from app.admin.clean import retention
from app.admin.router import router as admin_router
from app.airflow.v1 import router as airflow_v1_router
from app.airflow.v2 import cli_login_router, open_router
from app.airflow.v2 import router as airflow_v2_router
from app.auth.deps import HeaderCheck
from app.auth.router import router as auth_router
from app.auth.service import bootstrap
from app.config import Settings, get_settings
from app.db.engine import make_engine, reading, single_statements
from app.db.types import utcnow
from app.execution.claims import Claims
from app.execution.hub import Hub
from app.execution.reapers import DatabaseReach, ReaperThread
from app.execution.router import rails_router
from app.execution.router import router as execution_router
from app.fleet.replicas import Heartbeat, Me
from app.identity.router import router as identity_router
from app.logs import stores
from app.logs.deps import install_fault_handler
from app.logs.router import router as logs_router
from app.logs.service import LogEntryAppender
from app.ops import health, startup
from app.ops.migrate import head_revision
from app.orchestration.outcomes import InfraBackoff
from app.orchestration.promotion import next_eligible_at
from app.orchestration.router import router as orchestration_router
from app.routing.router import router as routing_router
from app.routing.service import check_routes
from app.telemetry import metrics, tracing
from app.telemetry.logconfig import sayer
from app.telemetry.observe import Observe
from app.ui.router import router as ui_router
from app.web.apidocs import router as docs_router
from app.web.draining import Drain
from app.web.ingress import Ingress, Limits
from app.web.problems import document_errors, install_error_handlers

log = logging.getLogger("fenceline")


def next_due(engine: Engine) -> float | None:
    """The wake-up timer's next time: when the earliest waiting task instance becomes claimable."""
    with Session(engine) as session:
        at = next_eligible_at(session=session, now=utcnow())
    return at.timestamp() if at is not None else None


def served_app(settings: Settings | None = None) -> FastAPI:
    """The application of one `fenceline serve` process, with what it was built of (modules,
    routes, schemas: some 200,000 objects, alive as long as the process) frozen out of the
    garbage collector, so that a full collection does not walk them all and stall every request
    under a fleet's batches (bench/batches.py measures their p99; docs/performance.md has the
    figures). Young collections come every FENCELINE_GC_YOUNG_THRESHOLD allocations rather than
    Python's 700, which would promote a batch's short-lived objects and bring full collections
    every few seconds. Not in create_app: a process that builds many apps (the tests) would keep
    every one of them."""
    settings = settings or get_settings()
    app = create_app(settings)
    gc.collect()
    gc.freeze()
    gc.set_threshold(settings.gc_young_threshold, *gc.get_threshold()[1:])
    metrics.watch_gc()
    return app


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        installation = bootstrap(app.state.engine, settings)
        app.state.installation = installation
        say = sayer(settings.log_format)
        if installation.generated_password is not None:  # only its hash is stored
            startup.hand_over_password(installation.generated_password, settings, say, terminal=sys.stdout.isatty())
        if store_note is not None:
            say(store_note)
        # The database was just reached (bootstrap): silence before now does not count toward
        # the lost thresholds of this process's sweeps, the reaper's and /v1/admin/reap's.
        app.state.database_reach = DatabaseReach()
        reaper = None
        if settings.reaper_interval_seconds > 0:
            reaper = ReaperThread(app.state.engine, settings, app.state.backoff, app.state.retention,
                                  app.state.database_reach)
            reaper.start()
        await app.state.wakeups.start()
        heartbeat = Heartbeat(app.state.engine, Me.starting(__version__, head_revision(),
                                                            settings.replica_heartbeat_seconds),
                              settings.replica_heartbeat_seconds)
        heartbeat.start()
        restore_signals = app.state.drain.install(asyncio.get_running_loop())
        yield
        restore_signals()
        heartbeat.stop()
        await app.state.wakeups.stop()
        if reaper is not None:
            reaper.stop()
        app.state.engine.dispose()
        metrics.process_exited()

    app = FastAPI(
        title="fenceline",
        version=__version__,
        summary="Execution control plane: admission, attempt fencing, outcome routing, Airflow-compatible reads.",
        lifespan=lifespan,
        docs_url=None, redoc_url=None,  # served from packaged assets (app/web/apidocs.py), not a CDN
        # Operation IDs read as methods of a generated client's tag class (ExecutionApi.report):
        # the function's name; /api/v1's twins of /api/v2 routes add "_v1" (app/airflow/v1.py).
        generate_unique_id_function=lambda route: route.name,
        servers=[{"url": settings.public_url, "description": "this server, as its operators reach it"}],
    )
    app.state.settings = settings
    app.state.backoff = InfraBackoff.from_settings(settings)  # the retry policy: routes and the reaper hand it on
    app.state.engine = make_engine(settings.resolved_database_url, pool_size=settings.database_pool_size,
                                   max_overflow=settings.database_max_overflow,
                                   pool_timeout=settings.database_pool_timeout_seconds)
    app.state.read_engine = reading(app.state.engine)
    app.state.single_statement_engine = single_statements(app.state.engine)
    metrics.watch_pool(app.state.engine)
    app.state.metrics_registry = health.scrape_registry(app.state.read_engine)
    app.state.wakeups = Hub(app.state.engine, lambda: next_due(app.state.read_engine))
    # Claims in flight at once: half the pool, the rest for every other request.
    app.state.claims = Claims(app.state.wakeups, app.state.engine, app.state.single_statement_engine,
                              threads=max(1, settings.database_pool_size // 2))
    app.state.drain = Drain()  # on SIGTERM: readiness fails, claims stop and the waiting ones end
    app.state.drain.on_drain(app.state.claims.drain)
    store_name, store_note = stores.choose(settings)
    app.state.log_store = stores.open_store(store_name, settings, app.state.engine)
    metrics.zeroed(metrics.log_store_errors, reason=app.state.log_store.fault_reasons)
    app.state.append_log_entry = LogEntryAppender(app.state.log_store, settings.log_max_request_bytes,
                                                  settings.log_max_attempt_bytes)  # the log entries of a batch
    app.state.check_routes = check_routes  # routing's, handed to orchestration's run creation
    app.state.retention = retention(settings, app.state.log_store)  # the reaper's, and /v1/admin/reap's
    app.state.database_reach = DatabaseReach()  # made again once the lifespan has reached the database
    install_error_handlers(app)
    install_fault_handler(app)  # the log store's
    app.add_middleware(Ingress, limits=Limits.from_settings(settings),  # before the URL check
                       gate=lambda scope: app.state.header_check(scope))
    if settings.trusted_proxies:  # outermost: the client's address, as a trusted proxy names it
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    app.add_middleware(Observe)  # outermost: a request's id, metrics and log line, whatever answers it
    document_errors(app)
    if tracing.wanted(settings.otel):
        tracing.instrument_app(app, app.state.engine)
    # The agents' routes first, then the Airflow-compatible reads: routing tries routes in order
    # (trying every route before the match costs up to a tenth of a tries read), and theirs are
    # the hot ones.
    # No router serves a path another also serves, so the order decides nothing else.
    for router in (execution_router, logs_router, airflow_v2_router, open_router, airflow_v1_router, cli_login_router,
                   health.router, docs_router, auth_router, identity_router, orchestration_router, rails_router,
                   routing_router, admin_router, ui_router):
        app.include_router(router)
    app.state.header_check = HeaderCheck(app.state, app.router.routes)  # the ingress's, once every route is in
    return app
