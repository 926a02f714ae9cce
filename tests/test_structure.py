"""The layout's promises, read off app/'s source (docs/decisions/0005): the seam between
orchestration and execution, services free of the HTTP framework, routers imported by main.py
alone, and one home for each concept that used to live in several."""

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


ROUTERS = {m for m in MODULES if "Router(" in source(m) and m != "app.web.routes"}
SERVICES = {m for m in MODULES if m.endswith(".service")} | {
    f"app.execution.{n}" for n in ("fence", "dispatch", "reapers", "observations", "operator", "attempts", "history")
} | {f"app.orchestration.{n}" for n in ("cas", "outcomes", "operator", "promotion", "readiness", "runs")} | {
    "app.admin.snapshot"}


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
        if module != "app.db":
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


def test_the_retry_policy_is_built_in_orchestration_once():
    """The application builds the retry policy at its start with orchestration's constructor and
    hands it down; execution passes on what it was given (the worker's own Backoff is not it)."""
    assert [m for m in MODULES if "Backoff.from_settings(" in source(m)] == ["app.main"]
    for module in MODULES:
        if not module.startswith(("app.orchestration", "app.worker")):
            assert "Backoff(" not in source(module), f"{module} builds a retry policy"
