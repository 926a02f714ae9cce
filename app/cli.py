"""The `fenceline` console command.

The server's modules (SQLAlchemy, the settings) are imported by the commands that use them, not
here: `fenceline worker alive`, a liveness probe run every few seconds, costs 0.05 s of CPU
instead of 0.5 s.
"""

import argparse
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from app import __version__

if TYPE_CHECKING:
    from app.config import Settings


def _prepare(settings: "Settings", say: Callable[[str], None] = lambda _: None, *, writes: bool = True) -> str:
    """The start-up checks `serve`, `migrate` and `logs copy` make (app/ops/startup.py): the
    database URL, the directories and their files kept private (app/ops/private.py; unless the
    command `writes` nothing), the database answering. Answers the URL."""
    from app.db.dialect import dialect_of
    from app.ops import private, startup

    engine = startup.database_engine(settings)
    if writes:
        startup.check_directories(settings)
        if (warning := private.repair(settings)) is not None:
            say(warning)
    if not dialect_of(engine).file_based:  # a file is opened, not reached (and not made by a refused start)
        startup.wait_for_database(engine, settings.db_connect_timeout_seconds, say)
    return settings.resolved_database_url


def _say(message: str) -> None:
    print(f"fenceline: {message}", flush=True)


def _migrate(settings: "Settings", say: Callable[[str], None] = lambda _: None, *, contract: bool = False) -> str:
    """The expand-only migrations (`contract`: every one); StartupError(5) when this release
    cannot serve the schema they leave. Answers the URL."""
    from app.ops.migrate import migrate, serving_refusal
    from app.ops.private import create_database_file
    from app.ops.startup import SCHEMA_NOT_AT_HEAD, StartupError

    url = _prepare(settings, say)
    create_database_file(settings)  # private from its first byte (app/ops/private.py)
    say(migrate(url, contract=contract))
    if (why := serving_refusal(url)) is not None:
        raise StartupError(SCHEMA_NOT_AT_HEAD, why)
    return url


def cmd_migrate(args: argparse.Namespace) -> int:
    from app.ops.startup import load_settings

    _migrate(load_settings(), _say, contract=args.contract)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.ops import startup
    from app.telemetry import logconfig, multiprocess

    settings = startup.load_settings()
    logconfig.configure(settings.log_format, args.log_level)
    say = logconfig.sayer(settings.log_format)
    if args.no_migrate:
        from app.ops.migrate import serving_refusal

        url = _prepare(settings, say)
        if (mismatch := serving_refusal(url)) is not None:
            raise startup.StartupError(startup.SCHEMA_NOT_AT_HEAD, mismatch)
    else:
        url = _migrate(settings, say)
    workers, refusal = server_processes(args.workers, url, settings)
    if refusal is not None:
        raise startup.StartupError(startup.WORKERS_REFUSED, refusal)
    sock = startup.bind(args.host, args.port)
    # Before the application (and prometheus_client) is imported: `--workers N` processes
    # inherit the environment it sets (app/telemetry/metrics.py).
    metrics_dir = multiprocess.prepare_multiprocess(workers)
    from uvicorn.supervisors import Multiprocess

    from app.main import served_app
    from app.web.serving import server_config

    say(f"data in {_redacted(url)}; {workers} server process{'es' if workers > 1 else ''}")
    say(f"listening on http://{args.host}:{args.port} — log in with POST /auth/token "
        f'{{"username": "{settings.admin_username}", "password": …}} (HTTP Basic on /api/v1); API docs at /docs')
    if settings.admin_password is None:
        say("the operator password is FENCELINE_ADMIN_PASSWORD, or the one generated and printed at this "
            "installation's first start")
    # X-Forwarded-For is believed only from FENCELINE_TRUSTED_PROXIES (app/main.py), not from
    # whatever uvicorn trusts by default. fenceline.access logs each request (app/telemetry/observe.py).
    common = {"log_level": args.log_level, "proxy_headers": False, "access_log": False,
              "log_config": logconfig.dict_config(settings.log_format, args.log_level)}
    try:
        if workers == 1:
            # uvicorn raises the signal that stopped it once more after its graceful shutdown, to
            # the handler in place before it started: a drained stop ends with status 0.
            signal.signal(signal.SIGTERM, _exit_normally)
            uvicorn.Server(server_config(served_app(settings), settings, **common)).run(sockets=[sock])
        else:
            # uvicorn's supervisor: N processes accept on the one bound socket, each building its
            # app from the same environment; one of them wins the sweep (app/execution/reapers.py).
            config = server_config("app.main:served_app", settings, factory=True, workers=workers, **common)
            Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()
        multiprocess.remove_multiprocess_dir(metrics_dir)
    return 0


def _exit_normally(_signum: int, _frame: object) -> NoReturn:
    raise SystemExit(0)


def server_processes(asked: int | None, url: str, settings: "Settings") -> tuple[int, str | None]:
    """How many server processes to run, or why not: SQLite takes one writer process only; on
    PostgreSQL every process may open its pool, its overflow and one listening connection, and
    all of one server's together must stay within its share of max_connections: what the
    headroom kept for other clients leaves, divided among FENCELINE_SERVER_REPLICAS servers.
    Unasked, one per core of the CPU quota (app/ops/cpu.py), as far as the budget allows."""
    if asked is not None and asked < 1:
        return 0, f"--workers must be at least 1, not {asked}"
    from app.db.dialect import dialect_for_url
    from app.ops.cpu import usable_cores

    if dialect_for_url(url).writers_take_turns:
        if asked not in (None, 1):
            return 0, (f"--workers {asked} refused: SQLite serves from one process (its writers queue on one "
                       "file lock); use PostgreSQL for more server processes")
        return 1, None
    per_process = settings.database_pool_size + settings.database_max_overflow + 1
    replicas = settings.server_replicas
    allowed = (database_max_connections(url) - settings.database_connections_headroom) // replicas
    if asked is None:
        return max(1, min(usable_cores(), allowed // per_process)), None
    if asked * per_process > allowed:
        share = "" if replicas == 1 else f", divided among FENCELINE_SERVER_REPLICAS={replicas} servers"
        return 0, (f"--workers {asked} refused: {asked} processes may open {asked * per_process} database "
                   f"connections ({asked} × (pool {settings.database_pool_size} + overflow "
                   f"{settings.database_max_overflow} + 1 listener)), more than PostgreSQL's max_connections "
                   f"minus FENCELINE_DATABASE_CONNECTIONS_HEADROOM{share} ({allowed}); lower --workers, "
                   "FENCELINE_DATABASE_POOL_SIZE or FENCELINE_DATABASE_MAX_OVERFLOW, or raise max_connections")
    return asked, None


def database_max_connections(url: str) -> int:
    """PostgreSQL's max_connections, asked of the server."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SHOW max_connections")).scalar_one())
    finally:
        engine.dispose()


def cmd_migrate_check(args: argparse.Namespace) -> int:
    """`fenceline migrate --check`: change nothing; 0 when this release serves the schema as it
    is (at its head, a later release's within the window, or only contract migrations waiting),
    5 otherwise (what the Kubernetes server Pods' init container polls while the migration Job
    runs)."""
    from app.ops.migrate import serving_refusal
    from app.ops.startup import SCHEMA_NOT_AT_HEAD, load_settings

    url = _prepare(load_settings(), _say, writes=False)
    if (mismatch := serving_refusal(url)) is not None:
        print(f"fenceline: {mismatch}", file=sys.stderr, flush=True)
        return SCHEMA_NOT_AT_HEAD
    print(f"fenceline: database at {_redacted(url)} is served by this version as it is", flush=True)
    return 0


# Exit status of `fenceline logs copy` when some streams could not be copied (docs/operations.md).
EXIT_LOG_CONFLICTS = 6


def cmd_logs_copy(args: argparse.Namespace) -> int:
    from app.db.engine import make_engine
    from app.logs import stores
    from app.logs.copy import copy_logs
    from app.ops.migrate import serving_refusal
    from app.ops.progress import ProgressBar
    from app.ops.startup import SCHEMA_NOT_AT_HEAD, load_settings

    settings = load_settings()
    url = _prepare(settings, _say)
    if (mismatch := serving_refusal(url)) is not None:
        print(f"fenceline: {mismatch}", file=sys.stderr, flush=True)
        return SCHEMA_NOT_AT_HEAD
    engine = make_engine(url)
    try:
        source_name = args.source or stores.choose(settings)[0]
        source = stores.open_store(source_name, settings, engine)
        target = stores.open_store(args.to, settings, engine)
        if source.name == target.name:
            print(f"fenceline: the logs are in the {source.name} store already", file=sys.stderr)
            return 2
        bar = ProgressBar(sys.stderr) if sys.stderr.isatty() else None  # nothing extra in a pipe
        report = copy_logs(source, target, engine, None if bar is None else lambda done, total: bar.show(
            done.streams, total, f"streams, {done.copied_bytes / 1048576:.1f} MiB copied"))
        if bar:
            bar.done()
    finally:
        engine.dispose()
    print(f"fenceline: {report.streams} log streams in the {source.name} store; copied {report.copied_bytes} bytes "
          f"of {report.copied_streams} streams to the {target.name} store (the rest were there already)", flush=True)
    if report.conflicts:
        print(f"fenceline: {len(report.conflicts)} streams hold other bytes in the {target.name} store and were left "
              f"as they are: {', '.join(report.conflicts[:20])}", file=sys.stderr, flush=True)
        return EXIT_LOG_CONFLICTS
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    if args.worker_command == "alive":
        from app.worker.liveness import check_alive

        return check_alive(args)
    from app.worker.main import run_worker

    return run_worker(args)


def cmd_launcher(args: argparse.Namespace) -> int:
    from app.launcher.main import pod_spec, run_launcher

    return pod_spec(args) if args.launcher_command == "pod-spec" else run_launcher(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from app.worker.demo import Demo, run_demo
    from app.worker.demo_fencing import FencingDemo

    return run_demo(keep=args.keep, timeout=args.timeout, scenario=FencingDemo if args.scenario == "fencing" else Demo)


def _store_name(value: str) -> str:
    from app.config import log_store_name

    try:
        return log_store_name(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a whole number from 1 to 65535, not {value!r}")
    return port


class _Parser(argparse.ArgumentParser):
    """argparse, refusing bad input in one line (its usage is a --help away), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="fenceline", description="fenceline execution control plane")
    parser.add_argument("--version", action="version", version=f"fenceline {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="migrate the database, then serve the API")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every "
                            "interface)")
    serve.add_argument("--port", type=_port, default=8000, help="the port to listen on (default 8000)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                       help="debug also prints the traceback of a start-up error")
    serve.add_argument("--workers", type=int, default=None,
                       help="server processes on the one port (default: one per core of the CPU quota on PostgreSQL, "
                            "within the connection budget; SQLite: 1, and only 1)")
    serve.add_argument("--no-migrate", action="store_true",
                       help="do not migrate; refuse to start (exit 5) unless this version serves the schema as it is")
    serve.set_defaults(func=cmd_serve)
    migrate = sub.add_parser("migrate", help="apply the expand-only migrations, stopping before the first contract one")
    migrate.set_defaults(func=cmd_migrate)
    migrate.add_argument("--contract", action="store_true",
                         help="apply every migration, contract ones too; refused (exit 8) while a replica of an "
                              "older release was seen within its liveness window (docs/upgrades.md)")
    migrate.add_argument("--check", dest="func", action="store_const", const=cmd_migrate_check,
                         help="change nothing; exit 5 unless this version serves the schema as it is (an init "
                              "container waiting for the migration job)")
    logs = sub.add_parser("logs", help="attempt log stores").add_subparsers(dest="logs_command", required=True)
    copy = logs.add_parser("copy", help="copy every stored log to another store (resumable, idempotent)")
    copy.add_argument("--to", required=True, type=_store_name, help="file, database or s3://bucket/prefix")
    copy.add_argument("--from", dest="source", type=_store_name,
                      help="the store to copy from (default: the configured one, FENCELINE_LOG_STORE)")
    copy.set_defaults(func=cmd_logs_copy)
    from app.worker.liveness import add_alive_command
    from app.worker.settings import add_arguments as worker_arguments

    worker = sub.add_parser("worker", help="run claimed tasks as local processes for one seat")
    worker_arguments(worker)
    add_alive_command(worker)
    worker.set_defaults(func=cmd_worker)
    from app.launcher.settings import add_arguments as launcher_arguments

    launcher = sub.add_parser("launcher", help="run claimed image tasks as one Kubernetes Pod per attempt")
    launcher_arguments(launcher)
    launcher.set_defaults(func=cmd_launcher)
    from app.admin.clean_cli import add_db_commands
    from app.admin.commands import add_commands

    add_commands(sub, _Parser)
    add_db_commands(sub, _Parser)
    demo = sub.add_parser("demo", help="a throw-away server, two workers and an example run, explained")
    demo.add_argument("--keep", action="store_true", help="keep the server up after the run (Ctrl-C ends it)")
    demo.add_argument("--timeout", type=float, default=120.0, help="give up on the run after this many seconds")
    demo.add_argument("--scenario", choices=("replace", "fencing"), default="replace",
                      help="replace: a worker killed mid-task, its task re-placed (the default); fencing: a worker "
                           "paused with its task, whose late write to a database the fencing guard refuses")
    demo.set_defaults(func=cmd_demo)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:
        from sqlalchemy.exc import SQLAlchemyError

        from app.ops.startup import DATABASE_UNREACHABLE, StartupError

        if not isinstance(exc, StartupError | SQLAlchemyError):
            raise
        if getattr(args, "log_level", None) == "debug":
            traceback.print_exc()
        if isinstance(exc, StartupError):
            print(f"fenceline: {exc}", file=sys.stderr, flush=True)
            return exc.status
        # The database failed after it answered (it went away, or refused a statement).
        why = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"fenceline: the database failed: {why}", file=sys.stderr, flush=True)
        return DATABASE_UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
