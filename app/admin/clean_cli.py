"""`fenceline db clean`: the command line of app/admin/clean.py.

Dry run by default, as Airflow's `airflow db clean`: it prints what it would delete, table by
table; `--yes` deletes it. Exit statuses (docs/operations.md): 0 done (or dry run), 2 bad usage
(a bad date, a negative number, an unknown flag), 4 the database cannot be reached or failed,
5 the schema is not one this version serves, 9 the log store failed (the batch it failed in was
kept whole; run it again).
"""

import argparse
import re
import sys
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.admin.clean import Counts

EXIT_LOG_STORE = 9
RELATIVE = re.compile(r"(\d+(?:\.\d+)?)d")


def before_date(value: str) -> datetime:
    """--before: an ISO date (midnight UTC), an ISO datetime (UTC unless it names its offset), or
    `<N>d`, N days before now."""
    if match := RELATIVE.fullmatch(value.strip()):
        return datetime.now(UTC) - timedelta(days=float(match.group(1)))
    try:
        if len(value.strip()) == 10:
            day = date.fromisoformat(value.strip())
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"give an ISO date (2026-01-31), an ISO datetime (2026-01-31T12:00:00+00:00) or <N>d (N days "
            f"ago), not {value!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def count(smallest: int) -> Any:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = smallest - 1
        if number < smallest:
            raise argparse.ArgumentTypeError(f"give a whole number of at least {smallest}, not {value!r}")
        return number
    return parse


def _table(counts: "Counts") -> str:
    return "\n".join(f"  {name:<24}{number:>12}" for name, number in counts.tables().items())


def cmd_db_clean(args: argparse.Namespace) -> int:
    from app.admin.clean import clean, plan
    from app.db.dialect import dialect_of
    from app.db.engine import make_engine
    from app.logs import stores
    from app.logs.stores.base import LogStoreFault
    from app.ops import startup
    from app.ops.migrate import serving_refusal
    from app.ops.progress import ProgressBar

    settings = startup.load_settings()
    engine = startup.database_engine(settings)
    if not dialect_of(engine).file_based:  # a file is opened, not reached
        startup.wait_for_database(engine, settings.db_connect_timeout_seconds)
    url = settings.resolved_database_url
    if (mismatch := serving_refusal(url)) is not None:
        print(f"fenceline: {mismatch}", file=sys.stderr, flush=True)
        return startup.SCHEMA_NOT_AT_HEAD
    engine = make_engine(url)
    try:
        from sqlmodel import Session

        with Session(engine) as session:
            due = plan(session=session, before=args.before, keep_last=args.keep_last)
        kept = f", keeping each DAG's newest {args.keep_last}" if args.keep_last else ""
        what = "deletes" if args.yes else "would delete (a dry run: give --yes to delete)"
        print(f"fenceline: db clean {what} the finished runs that ended before "
              f"{args.before.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC{kept}:\n{_table(due)}", flush=True)
        if not args.yes or not due.dag_runs:
            return 0
        store = stores.open_store(stores.choose(settings)[0], settings, engine)
        bar = ProgressBar(sys.stderr) if sys.stderr.isatty() else None

        def progress(done: "Counts") -> None:
            if bar is not None:
                bar.show(done.dag_runs, due.dag_runs, f"runs, {done.task_instances} task instances deleted")
            else:
                print(f"fenceline: deleted {done.dag_runs} of {due.dag_runs} runs", file=sys.stderr, flush=True)
        try:
            done = clean(engine, store, before=args.before, keep_last=args.keep_last, batch_runs=args.batch_size,
                         progress=progress)
        except LogStoreFault as exc:
            if bar:
                bar.done()
            print(f"fenceline: the {store.name} log store failed ({exc}); the runs of the batch it failed in are "
                  "kept: run db clean again", file=sys.stderr, flush=True)
            return EXIT_LOG_STORE
        if bar:
            bar.done()
    finally:
        engine.dispose()
    held = f"; {len(done.skipped)} runs were held by another transaction and kept" if done.skipped else ""
    print(f"fenceline: db clean deleted{held}:\n{_table(done)}", flush=True)
    return 0


def add_db_commands(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add `db clean` to the `fenceline` command's subparsers `sub`."""
    db = sub.add_parser("db", help="the database's history").add_subparsers(
        dest="db_command", required=True, parser_class=parser_class)
    text = ("delete finished runs that ended before a date, with their task instances, history, attempt "
            "records and logs (a dry run unless --yes); exit 0 done, 2 bad usage, 4 database unreachable, "
            "5 schema not served by this version, 9 log store failed (run it again)")
    clean = db.add_parser("clean", help=text, description=text)
    clean.add_argument("--before", required=True, type=before_date, metavar="DATE",
                       help="runs that ended before this: 2026-01-31 (midnight UTC), 2026-01-31T12:00:00+02:00, "
                            "or 30d (30 days ago)")
    clean.add_argument("--keep-last", type=count(0), default=0, metavar="N",
                       help="keep each DAG's newest N finished runs, whatever their age (default 0)")
    clean.add_argument("--yes", action="store_true", help="delete; without it, only print what would be deleted")
    clean.add_argument("--batch-size", type=count(1), default=50, metavar="RUNS",
                       help="runs deleted per transaction (default 50): short transactions while the service runs")
    clean.set_defaults(func=cmd_db_clean)
