"""The layout's promises, read off app/'s source (docs/decisions/0005, 0008): imports that only go
down the layers, a thin root, small modules, the dialect in one place, the seam between
orchestration and execution, services free of the HTTP framework, routers imported by main.py
alone, one home for each concept that used to live in several, and tests that mirror app/ with their
support code in tests/support."""

import ast
from functools import cache
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
FRAMEWORKS = ("fastapi", "starlette")


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in APP.rglob("*.py")}


@cache
def imports(module: str) -> frozenset[str]:
    """The modules `module` imports (absolute names; `from a import b` names a.b if it is a module)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES)
    return frozenset(found)


def reach(module: str) -> set[str]:
    """Every app module `module` imports, directly or through other app modules, itself included."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen or current not in MODULES:
            continue
        seen.add(current)
        todo.extend(imports(current))
    return seen


def source(module: str) -> str:
    return MODULES[module].read_text()


# The layers, lowest first (docs/decisions/0008-layers.md): a module imports modules of its own
# layer and of lower ones, never of a higher one. A module's layer is its longest prefix here.
LAYERS: list[tuple[str, ...]] = [
    ("app", "app.config", "app.db", "app.errors"),  # the root kit
    ("app.telemetry",),  # what the worker may use too
    ("app.web",),  # the HTTP kit every router stands on
    ("app.auth",),  # the domains, in the order they may use each other
    ("app.orchestration",),
    ("app.identity",),
    ("app.routing",),
    ("app.execution",),
    ("app.logs",),
    ("app.fleet",),
    ("app.models",),  # every table, for the migrations and the snapshot
    ("app.airflow", "app.ui", "app.admin", "app.ops"),  # the faces over the domains
    ("app.main",),
    ("app.cli",),
]
# The agents: HTTP clients of the server, outside its layers (tested on their own below); and
# the fencing guards, which task code imports.
AGENTS = ("app.worker", "app.launcher", "app.fencing")
KITS = ("app.db", "app.telemetry", "app.web")
DOMAINS = ("app.auth", "app.orchestration", "app.identity", "app.routing", "app.execution", "app.logs", "app.fleet")


def layer(module: str) -> int:
    """The place in LAYERS of `module` (ValueError for a module no layer holds)."""
    found = [(len(prefix), n) for n, prefixes in enumerate(LAYERS) for prefix in prefixes
             if module == prefix or module.startswith(prefix + ".")]
    if not found:
        raise ValueError(f"{module} is in no layer")
    return max(found)[1]


def app_imports(module: str) -> set[str]:
    """The app modules (or packages) `module` imports."""
    return {i for i in imports(module) if i == "app" or i.startswith("app.")}


def test_imports_only_go_down_the_layers():
    upward = [f"{m} -> {i}" for m in MODULES if not m.startswith(AGENTS)
              for i in app_imports(m) if not i.startswith(AGENTS) and layer(i) > layer(m)]
    assert not upward, upward


def test_no_two_domains_import_each_other():
    uses = {(m.split(".")[1], i.split(".")[1]) for m in MODULES if m.startswith(DOMAINS)
            for i in app_imports(m) if i.startswith(DOMAINS) and i.split(".")[1] != m.split(".")[1]}
    assert not {(a, b) for a, b in uses if (b, a) in uses}


def test_the_kits_import_no_domain():
    for module in (m for m in MODULES if m.startswith(KITS)):
        reached = {i for i in app_imports(module) if i.startswith(DOMAINS + ("app.models", "app.airflow", "app.ui"))}
        assert not reached, f"{module} imports {sorted(reached)}"


def test_the_worker_imports_nothing_of_the_server_but_telemetry():
    for module in (m for m in MODULES if m.startswith("app.worker")):
        server = {i for i in app_imports(module) if not i.startswith(("app.worker", "app.telemetry"))}
        assert not server, f"{module} imports {sorted(server)}"
    for module in (m for m in MODULES if m.startswith("app.telemetry")):
        assert not {i for i in app_imports(module) if i != "app.telemetry" and not i.startswith("app.telemetry.")}, \
            f"{module}: the worker imports telemetry, so telemetry imports nothing else of app"
    importers = {m for m in MODULES if not m.startswith(AGENTS)
                 for i in app_imports(m) if i.startswith("app.worker")}
    assert importers <= {"app.cli"}, importers


def test_the_launcher_imports_only_the_worker_and_telemetry():
    """The launcher is an agent of the worker's kind: it stands on the worker's pieces."""
    for module in (m for m in MODULES if m.startswith("app.launcher")):
        server = {i for i in app_imports(module) if not i.startswith(("app.launcher", "app.worker", "app.telemetry"))}
        assert not server, f"{module} imports {sorted(server)}"
    importers = {m for m in MODULES if not m.startswith("app.launcher")
                 for i in app_imports(m) if i.startswith("app.launcher")}
    assert importers <= {"app.cli"}, importers


def test_the_fencing_guards_import_nothing_of_the_server_and_nothing_imports_them():
    """Task code imports them (docs/fencing.md): they stand alone, with no dependency beyond
    the driver or client the task hands them."""
    for module in (m for m in MODULES if m.startswith("app.fencing")):
        assert {i for i in app_imports(module) if not i.startswith("app.fencing")} <= {"app"}, module
    assert not {m for m in MODULES if not m.startswith("app.fencing")
                for i in app_imports(m) if i.startswith("app.fencing")}


VERSIONS = APP.parent / "migrations" / "versions"


def test_every_migration_says_whether_it_only_adds():
    """Contract 10.1: each migration module sets `expand_only` to True or False at its top level
    (app/fleet/window.py reads it to know how far back a schema may be served)."""
    modules = sorted(VERSIONS.glob("*.py"))
    assert len(modules) >= 11
    for path in modules:
        values = [node.value for node in ast.parse(path.read_text()).body if isinstance(node, ast.Assign)
                  for target in node.targets if isinstance(target, ast.Name) and target.id == "expand_only"]
        assert len(values) == 1 and isinstance(values[0], ast.Constant) and isinstance(values[0].value, bool), \
            f"{path.name} does not say `expand_only = True` or `expand_only = False`"


def test_the_root_is_thin_and_modules_are_small():
    root = sorted(p.name for p in APP.glob("*.py"))
    assert len(root) <= 8, root
    large = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 400}
    assert not large, large


# Asking which database this is, anywhere but app/db/ (whose Dialect says what differs instead).
DIALECT_BRANCHES = ("is_postgres(", "dialect.name", "get_backend_name(", "sqlalchemy.dialects", "postgresql_where",
                    'startswith("postgres', 'startswith("sqlite', 'drivername="postgresql"')


def test_the_dialect_is_asked_in_one_place():
    branches = [f"{m}: {b}" for m in MODULES if not m.startswith("app.db")
                for b in DIALECT_BRANCHES if b in source(m)]
    assert branches == []


ROUTERS = {m for m in MODULES if "Router(" in source(m) and m != "app.web.routes"}
SERVICES = {m for m in MODULES if m.endswith(".service")} | {
    f"app.execution.{n}" for n in ("fence", "dispatch", "reapers", "observations", "operator", "attempts", "history",
                                   "claims", "hub", "listener", "batch")
} | {f"app.orchestration.{n}" for n in ("cas", "outcomes", "operator", "promotion", "readiness", "runs", "events")} | {
    "app.admin.snapshot", "app.fleet.replicas", "app.fleet.window"}


def test_orchestration_never_looks_at_workers_or_presentation():
    for module in (m for m in MODULES if m.startswith("app.orchestration")):
        for imported in imports(module):
            assert not imported.startswith(("app.execution", "app.identity", "app.airflow", "app.ui")), \
                f"{module} imports {imported}"


def test_services_do_not_know_http():
    assert len(SERVICES & set(MODULES)) == len(SERVICES), sorted(SERVICES - set(MODULES))
    for service in SERVICES:
        for module in reach(service):
            framework = [i for i in imports(module) if i.split(".")[0] in FRAMEWORKS]
            assert not framework, f"{service} reaches {module}, which imports {framework}"


def test_only_main_imports_a_router():
    assert "app.execution.router" in ROUTERS and "app.airflow.v2" in ROUTERS
    for module in MODULES:
        if module != "app.main":
            assert not imports(module) & ROUTERS, f"{module} imports a router"


def test_a_try_with_its_epochs_is_built_in_one_module():
    home = "app.execution.history"
    for user in ("app.airflow.service", "app.ui.views", "app.logs.service"):
        assert home in imports(user), f"{user} does not use {home}"
    for module in MODULES:
        if module not in (home, "app.execution.attempts"):
            assert "select(TaskAttempt" not in source(module), f"{module} queries attempt records itself"
        if module != home:
            assert "select(TaskInstanceHistory" not in source(module), f"{module} queries try history itself"


def test_count_plus_page_is_written_once():
    for module in MODULES:
        if module != "app.db.statements":
            text = source(module)
            assert not ("func.count()" in text and ".offset(" in text), f"{module} pages by itself"


def test_task_instance_or_404_is_one_function():
    builders = [m for m in MODULES if 'not_found("task-instance"' in source(m)]
    assert builders == ["app.orchestration.runs"]


def test_every_token_kind_is_minted_in_auth_tokens():
    for module in MODULES:
        if module == "app.auth.tokens":
            continue
        assert "jwt" not in {i.split(".")[0] for i in imports(module)}, f"{module} imports jwt"
        text = source(module)
        assert "tokens.mint(" not in text and '"scope":' not in text, f"{module} mints a token itself"


def test_every_router_hops_to_a_thread_once_per_request():
    """A router that is not app.web.routes.Router (whose routes are Routes) would validate a `def`
    endpoint's answer in a second thread hop (docs/performance.md)."""
    for module in ROUTERS:
        assert "APIRouter(" not in source(module), f"{module}: FastAPI's APIRouter, not app.web.routes.Router"
        assert "app.web.routes" in imports(module), f"{module} does not build its routers with Router"


def test_the_claim_route_translates_http_and_the_claim_lives_in_execution():
    router = ast.parse(source("app.execution.router"))
    (claim,) = [node for node in router.body if isinstance(node, ast.AsyncFunctionDef) and node.name == "claim"]
    body = claim.body[1:] if isinstance(claim.body[0], ast.Expr) else claim.body  # past the docstring
    assert body[-1].end_lineno - body[0].lineno + 1 <= 20
    homes = {m for m in MODULES if "def claim_turn(" in source(m)}
    assert homes == {"app.execution.claims"}


def test_the_retry_policy_is_built_in_orchestration_once():
    """The application builds the retry policy at its start with orchestration's constructor and
    hands it down; execution passes on what it was given (the agents' own Backoff is not it)."""
    assert [m for m in MODULES if "InfraBackoff.from_settings(" in source(m)] == ["app.main"]
    for module in MODULES:
        if not module.startswith(("app.orchestration", "app.worker", "app.launcher")):
            assert "InfraBackoff(" not in source(module), f"{module} builds a retry policy"


def _literals(module: str) -> list[set[str]]:
    """The strings of each tuple, list or set literal of string constants in `module`."""
    return [{e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            for node in ast.walk(ast.parse(source(module))) if isinstance(node, (ast.Tuple, ast.List, ast.Set))]


def test_the_infrastructure_reasons_are_written_once():
    """Contract 2.4's reasons are app/telemetry/reasons.py's, which the server and the launcher
    both import (the launcher may import nothing of the server's domains)."""
    from app.execution import schemas
    from app.launcher import outcome
    from app.telemetry.reasons import INFRA_REASONS

    assert outcome.INFRA_REASONS is INFRA_REASONS and schemas.INFRA_REASONS is INFRA_REASONS
    copies = [m for m in MODULES if m != "app.telemetry.reasons"
              for strings in _literals(m) if len(strings & set(INFRA_REASONS)) > 1]
    assert copies == [], f"a second list of infrastructure reasons in {copies}"


def test_the_attempt_identity_is_declared_once():
    """auth/attempt_key.AttemptIdentity names an attempt; the token's minting takes it, the fence
    and the claim read its fields off the row, and the correlation bag (the claim's WorkItem,
    the worker's environment for user code) repeats them with the id as ti_id."""
    from app.auth.attempt_key import ATTEMPT_FIELDS, AttemptIdentity
    from app.auth.tokens import mint_attempt
    from app.execution.dispatch import CLAIMED_COLUMNS
    from app.execution.fence import FENCE_COLUMNS
    from app.execution.schemas import Correlation
    from app.worker.process import CORRELATION_ENV

    assert ATTEMPT_FIELDS == ("dag_id", "run_id", "task_id", "map_index", "try_number", "attempt_epoch")
    assert mint_attempt.__annotations__["ti"] is AttemptIdentity
    for columns in (FENCE_COLUMNS, CLAIMED_COLUMNS):
        assert {"id", *ATTEMPT_FIELDS} <= {c.name for c in columns}
    bag = ("ti_id", *ATTEMPT_FIELDS, "tenant_id", "trace_id")
    assert tuple(Correlation.model_fields) == bag and tuple(CORRELATION_ENV) == bag
    types = AttemptIdentity.__annotations__
    assert all(Correlation.model_fields[name].annotation is types[name] for name in ATTEMPT_FIELDS)
    assert Correlation.model_fields["ti_id"].annotation is types["id"]


def test_a_name_names_one_thing():
    """One class per name across app/ (the Airflow wire schemas mirror Airflow's names, so are
    left out), and one try_log: the logs domain's; the faces' wrappers say what they add."""
    homes: dict[str, list[str]] = {}
    for module in MODULES:
        if module not in ("app.airflow.v1_schemas", "app.airflow.v2_schemas"):
            for node in ast.parse(source(module)).body:
                if isinstance(node, ast.ClassDef):
                    homes.setdefault(node.name, []).append(module)
    shared = {name: found for name, found in homes.items() if len(found) > 1}
    assert shared == {}
    assert [m for m in MODULES if "def try_log(" in source(m)] == ["app.logs.service"]


TESTS = APP.parent / "tests"
# The root's test modules test the whole, or app/cli.py (which sits at app/'s root).
ROOT_TESTS = {"test_structure.py", "test_installs.py", "test_deploy.py", "test_deploy_kubernetes.py", "test_alerts.py",
              "test_schema_conformance.py", "test_generated_sdk.py", "test_cli.py", "test_serve_workers.py"}


def test_the_tests_mirror_app():
    """A folder of tests per app package; at tests/'s root only the modules that test the whole."""
    packages = {p.parent.name for p in APP.glob("*/__init__.py")}
    folders = {p.parent.name for p in TESTS.glob("*/__init__.py")} - {"support"}
    assert folders == packages, sorted(folders ^ packages)
    root = {p.name for p in TESTS.glob("*.py")} - {"__init__.py", "conftest.py"}
    assert root <= ROOT_TESTS, sorted(root - ROOT_TESTS)


def test_support_code_lives_in_tests_support():
    """Outside tests/support a module is a test module or a conftest, and imports of the tests'
    own code come from tests/support alone: no test module or conftest imports another's."""
    for path in TESTS.rglob("*.py"):
        relative = path.relative_to(TESTS)
        if relative.parts[0] == "support":
            continue
        assert path.name.startswith("test_") or path.name in ("conftest.py", "__init__.py"), \
            f"tests/{relative} is support code outside tests/support"
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                assert name.split(".")[0] != "tests" or name.startswith("tests.support"), \
                    f"tests/{relative} imports {name}"
    for path in (TESTS / "support").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tests":
                assert node.module.startswith("tests.support"), f"{path} imports {node.module}"
