"""`fenceline runs …` and `fenceline tasks …`: the operator's reads and rails from a terminal.

An HTTP client of the server's /v1 API, like the worker: each command is one or two requests,
answered as a table for people or, with --json, the server's JSON for scripts. A refusal (any
4xx) is one line and exit status 1; a server not reached or failing (5xx) is one line and 3;
bad credentials or flags are one line and 2. Never a traceback.
"""

import argparse
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

DEFAULT_SERVER = "http://127.0.0.1:8000"
EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
TIMEOUT_SECONDS = 30.0


class CommandRefused(Exception):
    """A command that could not be done, with the one line that says why and its exit status."""

    def __init__(self, line: str, status: int) -> None:
        super().__init__(line)
        self.status = status


# --- the connection ---------------------------------------------------------------------------

def _read_secret(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            secret = f.read().strip()
    except OSError as exc:
        raise CommandRefused(f"cannot read the {what} file {path}: {exc.strerror}", EXIT_USAGE) from None
    if not secret:
        raise CommandRefused(f"the {what} file {path} is empty", EXIT_USAGE)
    return secret


def _device_file() -> Path:
    """Where the device token of this user's last login is kept (decision 0012): with it, others'
    wrong passwords for the same username do not slow this terminal's logins."""
    return Path(os.environ.get("FENCELINE_DEVICE_FILE", "~/.config/fenceline/device")).expanduser()


def _device_header() -> dict[str, str]:
    try:
        token = _device_file().read_text().strip()
    except OSError:
        return {}
    return {"Fenceline-Device": token} if token else {}


def _remember_device(token: str | None) -> None:
    """Kept readable by its owner only; a terminal that cannot keep it still works, unrecognised."""
    if not token:
        return
    path = _device_file()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
    except OSError:
        pass


class Server:
    """The server the operator talks to, logged in on first use."""

    def __init__(self, args: argparse.Namespace) -> None:
        import httpx  # here, not at the top: `fenceline worker alive`, a probe run every few seconds, needs none

        self.url = args.server.rstrip("/")
        self.args = args
        self.http = httpx.Client(base_url=self.url, timeout=TIMEOUT_SECONDS)
        self.headers: dict[str, str] | None = None

    def _token(self) -> str:
        """--token-file, else FENCELINE_TOKEN (unless --password-file), else --password-file, else
        FENCELINE_PASSWORD."""
        args = self.args
        if args.token_file:
            return _read_secret(args.token_file, "token")
        if not args.password_file and (token := os.environ.get("FENCELINE_TOKEN")):
            return token
        if args.password_file:
            password = _read_secret(args.password_file, "password")
        elif not (password := os.environ.get("FENCELINE_PASSWORD", "")):
            raise CommandRefused("no credentials: give --password-file or --token-file, or set FENCELINE_PASSWORD or "
                          "FENCELINE_TOKEN", EXIT_USAGE)
        answer = self._send("POST", "/auth/token", json={"username": args.username, "password": password},
                            headers=_device_header())
        _remember_device(answer.get("device_token"))
        return answer["access_token"]

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise CommandRefused(f"cannot reach the server at {self.url}: {exc}", EXIT_UNREACHABLE) from None
        if resp.is_success:
            try:
                return resp.json()
            except ValueError:
                raise CommandRefused(
                    f"the server at {self.url} answered {resp.status_code} without JSON: is it fenceline?",
                    EXIT_UNREACHABLE) from None
        try:
            problem = resp.json()
        except ValueError:
            problem = {}
        detail = problem.get("detail") if isinstance(problem, dict) else None
        kind = problem.get("type") if isinstance(problem, dict) else None
        said = f"{resp.status_code}{' ' + kind if kind else ''}"
        status = EXIT_UNREACHABLE if resp.status_code >= 500 else EXIT_REFUSED
        raise CommandRefused(f"refused ({said}): {detail or resp.reason_phrase}", status)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.headers is None:
            self.headers = {"Authorization": f"Bearer {self._token()}"}
        return self._send(method, path, headers=self.headers, **kwargs)


# --- tables -------------------------------------------------------------------------------------

def table(rows: Iterable[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """`rows` as a plain text table: one header line, then one line per row."""
    cells = [[title.upper() for title, _ in columns]]
    cells += [["-" if row.get(key) is None else str(row.get(key)) for _, key in columns] for row in rows]
    widths = [max(len(line[n]) for line in cells) for n in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in cells)


def _counts(run: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for ti in run["task_instances"]:
        counts[ti["state"]] = counts.get(ti["state"], 0) + 1
    return " ".join(f"{state}:{n}" for state, n in sorted(counts.items()))


RUN_COLUMNS = [("dag", "dag_id"), ("run", "run_id"), ("state", "state"), ("created", "created_at"),
               ("ended", "ended_at"), ("tasks", "tasks")]
TI_COLUMNS = [("ti", "ti_id"), ("task", "task_id"), ("map", "map_index"), ("state", "state"), ("try", "try_number"),
              ("epoch", "attempt_epoch"), ("infra", "infra_attempts"), ("failure", "last_failure_reason")]
ATTEMPT_COLUMNS = [("try", "try_number"), ("epoch", "attempt_epoch"), ("state", "state"), ("kind", "outcome_kind"),
                   ("reason", "reason"), ("execution", "execution_id"), ("claimed", "claimed_at"),
                   ("ended", "ended_at")]


def _runs_table(runs: list[dict[str, Any]]) -> str:
    return table(({**r, "tasks": _counts(r)} for r in runs), RUN_COLUMNS)


def _run_text(run: dict[str, Any]) -> str:
    return f"{_runs_table([run])}\n\n{table(run['task_instances'], TI_COLUMNS)}"


# --- the commands -----------------------------------------------------------------------------

def _run_path(args: argparse.Namespace) -> str:
    return f"/v1/runs/{quote(args.dag_id, safe='')}/{quote(args.run_id, safe='')}"


def _ti_id(server: Server, args: argparse.Namespace) -> str:
    """The task instance the arguments name: its id, or DAG RUN TASK (with --map-index)."""
    named = args.ti
    if len(named) == 1:
        try:
            return str(uuid.UUID(named[0]))
        except ValueError:
            raise CommandRefused(f"{named[0]!r} is no task instance id (give its id, or DAG RUN TASK)",
                                 EXIT_USAGE) from None
    if len(named) != 3:
        raise CommandRefused("name a task instance by its id, or by DAG RUN TASK", EXIT_USAGE)
    dag_id, run_id, task_id = named
    run = server.call("GET", f"/v1/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}")
    for ti in run["task_instances"]:
        if (ti["task_id"], ti["map_index"]) == (task_id, args.map_index):
            return ti["ti_id"]
    raise CommandRefused(f"run {run_id!r} of DAG {dag_id!r} has no task {task_id!r} with map index {args.map_index}",
                  EXIT_REFUSED)


def runs_list(server: Server, args: argparse.Namespace) -> tuple[Any, str]:
    params = {"limit": args.limit, **({"dag_id": args.dag_id} if args.dag_id else {})}
    found = server.call("GET", "/v1/runs", params=params)
    return found, _runs_table(found["items"]) + f"\n({len(found['items'])} of {found['total_entries']} runs)"


def runs_show(server: Server, args: argparse.Namespace) -> tuple[Any, str]:
    run = server.call("GET", _run_path(args))
    return run, _run_text(run)


def _run_rail(rail: str, done: str) -> Callable[[Server, argparse.Namespace], tuple[Any, str]]:
    def command(server: Server, args: argparse.Namespace) -> tuple[Any, str]:
        run = server.call("POST", f"{_run_path(args)}/{rail}")
        return run, f"{done}\n{_run_text(run)}"
    return command


def tasks_list(server: Server, args: argparse.Namespace) -> tuple[Any, str]:
    tis = server.call("GET", _run_path(args))["task_instances"]
    if args.state:
        tis = [ti for ti in tis if ti["state"] in args.state]
    return tis, table(tis, TI_COLUMNS)


def tasks_show(server: Server, args: argparse.Namespace) -> tuple[Any, str]:
    ti = server.call("GET", f"/v1/task-instances/{_ti_id(server, args)}")
    return ti, "\n".join(f"{key:<20} {'-' if value is None else value}" for key, value in ti.items())


def tasks_attempts(server: Server, args: argparse.Namespace) -> tuple[Any, str]:
    items = server.call("GET", f"/v1/task-instances/{_ti_id(server, args)}/attempts")["items"]
    return items, table(items, ATTEMPT_COLUMNS)


def _ti_rail(rail: str, done: str, body: Callable[[argparse.Namespace], Any] = lambda args: None
             ) -> Callable[[Server, argparse.Namespace], tuple[Any, str]]:
    def command(server: Server, args: argparse.Namespace) -> tuple[Any, str]:
        ti = server.call("POST", f"/v1/task-instances/{_ti_id(server, args)}/{rail}", json=body(args))
        return ti, f"{done}\n{table([ti], TI_COLUMNS)}"
    return command


# --- the parsers --------------------------------------------------------------------------------

def _connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default=os.environ.get("FENCELINE_SERVER", DEFAULT_SERVER),
                        help=f"the fenceline server (env FENCELINE_SERVER; default {DEFAULT_SERVER})")
    parser.add_argument("--username", default=os.environ.get("FENCELINE_USERNAME", "admin"),
                        help="the operator's name for a password login (env FENCELINE_USERNAME; default admin)")
    parser.add_argument("--password-file", help="a file holding the operator's password (else env FENCELINE_PASSWORD)")
    parser.add_argument("--token-file", help="a file holding an operator token (else env FENCELINE_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print the server's JSON, for scripts")


def _ti_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ti", nargs="+", metavar="TI", help="the task instance: its id, or DAG RUN TASK")
    parser.add_argument("--map-index", type=int, default=-1, help="with DAG RUN TASK: the map index (default -1)")


def add_commands(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add `runs` and `tasks` to the `fenceline` command's subparsers `sub`."""
    runs = sub.add_parser("runs", help="list, show and cancel runs; clear their failed tasks").add_subparsers(
        dest="runs_command", required=True, parser_class=parser_class)
    tasks = sub.add_parser("tasks", help="list and show task instances and their attempts; clear, mark, re-place") \
        .add_subparsers(dest="tasks_command", required=True, parser_class=parser_class)

    def command(group: Any, name: str, run: Callable[[Server, argparse.Namespace], tuple[Any, str]],
                help: str, arguments: Callable[[argparse.ArgumentParser], None] | None = None
                ) -> argparse.ArgumentParser:
        parser = group.add_parser(name, help=help, description=help)
        _connection_arguments(parser)
        if arguments is not None:
            arguments(parser)
        parser.set_defaults(func=lambda args: run_command(run, args))
        return parser

    def run_keys(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("dag_id", metavar="DAG")
        parser.add_argument("run_id", metavar="RUN")

    listing = command(runs, "list", runs_list, "the runs, newest first")
    listing.add_argument("--dag-id", help="only this DAG's runs")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50, at most 500)")
    command(runs, "show", runs_show, "a run and its task instances", run_keys)
    command(runs, "cancel", _run_rail("cancel", "cancelled: what was in flight failed, the rest was skipped"),
            "cancel a run: its tasks in flight end failed (their workers are told to stop), the rest skipped",
            run_keys)
    command(runs, "clear-failed", _run_rail("clear-failed", "cleared the failed and skipped tasks"),
            "clear a run's failed, upstream_failed and skipped tasks (this resumes a cancelled run)", run_keys)
    tis = command(tasks, "list", tasks_list, "a run's task instances", run_keys)
    tis.add_argument("--state", action="append", help="only task instances in this state (repeatable)")
    command(tasks, "show", tasks_show, "a task instance", _ti_arguments)
    command(tasks, "attempts", tasks_attempts, "every attempt epoch of a task instance", _ti_arguments)
    command(tasks, "clear", _ti_rail("clear", "cleared: a new try (any attempt in flight is fenced off)"),
            "clear a task instance: a new try; an attempt in flight is fenced off and told to stop", _ti_arguments)
    mark = command(tasks, "mark", _ti_rail("mark", "marked (any attempt in flight is fenced off)",
                                           lambda args: {"state": args.state}),
                   "mark a task instance success or failed; an attempt in flight is fenced off", _ti_arguments)
    mark.add_argument("state", choices=["success", "failed"], help="the verdict")
    command(tasks, "replace", _ti_rail("replace", "re-placed: the attempt in flight ended unexecutable"),
            "re-place now: the attempt in flight ends unexecutable (operator_replaced) and the same try is "
            "scheduled again at once, on the infra budget", _ti_arguments)


def run_command(run: Callable[[Server, argparse.Namespace], tuple[Any, str]], args: argparse.Namespace) -> int:
    server = Server(args)
    try:
        answer, text = run(server, args)
    except CommandRefused as exc:
        print(f"fenceline: {exc}", file=sys.stderr, flush=True)
        return exc.status
    finally:
        server.http.close()
    print(json.dumps(answer, indent=2) if args.json else text, flush=True)
    return 0
