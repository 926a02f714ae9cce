"""The Kubernetes base with its optional components, rendered by `kubectl kustomize` as a user's
overlay renders them: every object held to Kubernetes' own OpenAPI schemas (kubernetes-validate,
strict: no field Kubernetes does not know) for the oldest and the newest version it ships here,
then read for what each promises — who may reach whom, the connection budget against a real
PostgreSQL, the monitoring and the TLS Ingress wired to the objects they name.

The Prometheus Operator's kinds are not Kubernetes' schemas: tests/test_alerts.py checks the
PrometheusRule's rules with promtool and against a live server's /metrics.
"""

import copy
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from sqlalchemy import create_engine, text

from app.cli import server_processes
from app.config import Settings
from tests.support.databases import BACKENDS, PG_ADMIN_URL
from tests.support.deploy import REPO, env_of, one, pod_spec, run, tool

BASE = REPO / "deploy" / "kubernetes"
COMPONENTS = ("launcher", "monitoring", "ingress", "contract")
# The oldest and the newest Kubernetes whose schemas kubernetes-validate ships.
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
OPERATOR_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
POSTGRES_DEFAULT_MAX_CONNECTIONS = 100  # and the postgres:16 image's


def render(directory: Path, *components: str) -> list[dict[str, Any]]:
    """An overlay of the base with `components`, as docs/operations.md shows it, rendered."""
    base = os.path.relpath(BASE, directory)  # kustomize takes no absolute paths
    listed = ", ".join(f"{base}/{c}" for c in components)
    (directory / "kustomization.yaml").write_text(f"resources: [{base}]\ncomponents: [{listed}]\n")
    done = run(tool("kubectl"), "kustomize", str(directory))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(tmp_path_factory.mktemp("everything"), *COMPONENTS)


def added(by: str, base: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """The objects the component `by` adds to the base."""
    names = {(o["kind"], o["metadata"]["name"]) for o in base}
    return [o for o in render(tmp_path, by) if (o["kind"], o["metadata"]["name"]) not in names]


class TestSchemas:
    @pytest.mark.parametrize("version", VERSIONS)
    def test_every_object_is_valid_for_kubernetes(self, base, everything, version):
        for rendered in (base, everything):
            for o in rendered:
                if (o["apiVersion"], o["kind"]) not in OPERATOR_KINDS:
                    kubernetes_validate.validate(o, version, strict=True)
        assert {(o["apiVersion"], o["kind"]) for o in everything} & OPERATOR_KINDS == OPERATOR_KINDS

    @pytest.mark.parametrize("version", VERSIONS)
    def test_a_field_kubernetes_does_not_know_is_refused(self, base, version):
        workers = copy.deepcopy(one(base, "StatefulSet", "fenceline-worker"))
        pod_spec(workers)["containers"][0]["livenessProbe"]["exec"]["commands"] = ["true"]
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(workers, version, strict=True)


class TestNetworkPolicies:
    def test_the_server_takes_http_from_fencelines_pods_and_labelled_clients_only(self, base):
        policy = one(base, "NetworkPolicy", "fenceline-server")["spec"]
        server = one(base, "Deployment", "fenceline-server")
        assert policy["podSelector"]["matchLabels"].items() <= server["spec"]["template"]["metadata"]["labels"].items()
        assert policy["policyTypes"] == ["Ingress"]  # egress: the database and store are the user's addresses
        [rule] = policy["ingress"]
        [port] = pod_spec(server)["containers"][0]["ports"]
        assert rule["ports"] == [{"protocol": "TCP", "port": port["containerPort"]}]
        assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "fenceline"}}},
                                {"podSelector": {"matchLabels": {"fenceline/api-access": "true"}}},
                                {"namespaceSelector": {"matchLabels": {"fenceline/api-access": "true"}}}]

    def test_the_workers_and_the_launcher_are_among_those_it_admits(self, everything):
        admitted = one(everything, "NetworkPolicy", "fenceline-server")["spec"]["ingress"][0]["from"][0]
        for kind, name in (("StatefulSet", "fenceline-worker"), ("Deployment", "fenceline-launcher")):
            labels = one(everything, kind, name)["spec"]["template"]["metadata"]["labels"]
            assert admitted["podSelector"]["matchLabels"].items() <= labels.items(), name

    def test_workers_take_nothing_and_reach_the_server_and_dns_only(self, base):
        policy = one(base, "NetworkPolicy", "fenceline-worker")["spec"]
        workers = one(base, "StatefulSet", "fenceline-worker")
        assert policy["podSelector"]["matchLabels"].items() <= workers["spec"]["template"]["metadata"]["labels"].items()
        assert policy["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in policy  # no connection in
        to_server, to_dns = policy["egress"]
        server = one(base, "Deployment", "fenceline-server")
        assert to_server["to"][0]["podSelector"]["matchLabels"].items() <= server["spec"]["template"]["metadata"][
            "labels"].items()
        assert to_server["ports"] == [{"protocol": "TCP", "port": 8000}]
        assert to_dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
        assert sorted((p["protocol"], p["port"]) for p in to_dns["ports"]) == [("TCP", 53), ("UDP", 53)]


@pytest.fixture(scope="module")
def postgres_max_connections() -> int:
    if "postgresql" not in BACKENDS:
        pytest.skip("PostgreSQL is not among the test backends")
    engine = create_engine(PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            found = int(conn.execute(text("SHOW max_connections")).scalar_one())
    finally:
        engine.dispose()
    if found != POSTGRES_DEFAULT_MAX_CONNECTIONS:
        pytest.skip(f"the budgets are stated for max_connections {POSTGRES_DEFAULT_MAX_CONNECTIONS}, not {found}")
    return found


def fits(env: dict[str, str], args: list[str]) -> tuple[int, str | None]:
    """What `serve` with this environment and these arguments decides on the test PostgreSQL
    (app/cli.py asks it for max_connections): its process count, or its refusal."""
    fields = {name.removeprefix("FENCELINE_").lower(): value for name, value in env.items()
              if name.startswith("FENCELINE_") and value is not None}
    assert fields.keys() <= Settings.model_fields.keys(), fields.keys() - Settings.model_fields.keys()
    workers = int(args[args.index("--workers") + 1])
    return server_processes(workers, PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://", 1),
                            Settings(**fields))


class TestConnectionBudget:
    def test_each_server_replica_keeps_to_its_share_a_rollouts_surge_included(self, base, postgres_max_connections):
        server = one(base, "Deployment", "fenceline-server")
        [container] = pod_spec(server)["containers"]
        env = {name: e.get("value") for name, e in env_of(container).items()}
        surge = server["spec"]["strategy"]["rollingUpdate"]["maxSurge"]
        assert int(env["FENCELINE_SERVER_REPLICAS"]) == server["spec"]["replicas"] + surge
        assert fits(env, container["args"]) == (2, None)
        # the budget is the replicas' whole share: a fourth server would not fit
        assert fits({**env, "FENCELINE_SERVER_REPLICAS": "4"}, container["args"])[1] is not None

    def test_each_compose_replica_keeps_to_its_share(self, postgres_max_connections):
        services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
        replicas = {name: s for name, s in services.items() if "serve" in (s.get("command") or [])}
        for service in replicas.values():
            assert int(service["environment"]["FENCELINE_SERVER_REPLICAS"]) == len(replicas)
            assert fits(service["environment"], service["command"]) == (2, None)

    def test_each_compose_replica_names_the_url_it_is_reached_at(self):
        services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
        for service in (s for s in services.values() if "serve" in (s.get("command") or [])):
            [published] = service["ports"]
            assert service["environment"]["FENCELINE_PUBLIC_URL"] == f"http://localhost:{published.split(':')[0]}"


class TestMonitoringComponent:
    def test_it_scrapes_each_server_pod_with_the_metrics_token(self, base, tmp_path):
        objects = added("monitoring", base, tmp_path)
        assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
            ("PrometheusRule", "fenceline"), ("ServiceMonitor", "fenceline")]
        monitor = one(objects, "ServiceMonitor", "fenceline")["spec"]
        service = one(base, "Service", "fenceline")
        assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert not monitor["selector"]["matchLabels"].items() <= one(base, "Service", "fenceline-worker")[
            "metadata"]["labels"].items()
        [endpoint] = monitor["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["path"] == "/metrics"
        assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "fenceline-metrics",
                                                                               "key": "token"}}
        # Its scrapes' job is the Service's name (no jobLabel), which the alerts select on.
        assert "jobLabel" not in monitor
        rules = one(objects, "PrometheusRule", "fenceline")["spec"]["groups"][0]["rules"]
        [down] = [r for r in rules if r["alert"] == "FencelineServerDown"]
        assert f'up{{job="{service["metadata"]["name"]}"}}' in down["expr"]


class TestIngressComponent:
    def test_tls_for_the_host_it_routes_and_the_public_url_it_names(self, base, tmp_path):
        rendered = render(tmp_path, "ingress")
        ingress = one(rendered, "Ingress", "fenceline")["spec"]
        [rule] = ingress["rules"]
        [tls] = ingress["tls"]
        assert tls["hosts"] == [rule["host"]] and tls["secretName"]
        [path] = rule["http"]["paths"]
        service = one(base, "Service", "fenceline")
        assert path["backend"]["service"]["name"] == service["metadata"]["name"]
        assert path["backend"]["service"]["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
        # the OpenAPI document's `servers` entry: the HTTPS URL, not the in-cluster one
        assert one(rendered, "ConfigMap", "fenceline")["data"]["FENCELINE_PUBLIC_URL"] == f"https://{rule['host']}"
        assert one(base, "ConfigMap", "fenceline")["data"]["FENCELINE_PUBLIC_URL"] == "http://fenceline"


class TestUpgrades:
    """Expand before the rollout, contract after it, and a drain that fits the grace period
    (docs/upgrades.md)."""

    def test_the_base_migrates_expand_only_and_the_contract_component_the_rest(self, base, tmp_path):
        [expand] = pod_spec(one(base, "Job", "fenceline-migrate"))["containers"]
        assert expand["args"] == ["migrate"]
        [contract] = [o for o in added("contract", base, tmp_path) if o["kind"] == "Job"]
        [container] = pod_spec(contract)["containers"]
        assert container["args"] == ["migrate", "--contract"]
        assert pod_spec(contract)["restartPolicy"] == "OnFailure" and contract["spec"]["backoffLimit"] > 0
        assert env_of(container)["FENCELINE_DATABASE_URL"] == env_of(expand)["FENCELINE_DATABASE_URL"]

    def test_a_server_pod_drains_within_its_grace_period(self, base):
        spec = pod_spec(one(base, "Deployment", "fenceline-server"))
        [container] = spec["containers"]
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        assert command[0] == "sleep"
        readiness = container["readinessProbe"]
        assert int(command[1]) >= readiness["periodSeconds"]  # the endpoints see it go before SIGTERM
        grace = float(env_of(container)["FENCELINE_DRAIN_GRACE_SECONDS"]["value"])
        assert int(command[1]) + grace < spec["terminationGracePeriodSeconds"]

    def test_a_worker_pod_finishes_its_tasks_within_its_grace_period(self, base):
        spec = pod_spec(one(base, "StatefulSet", "fenceline-worker"))
        [container] = spec["containers"]
        grace = float(env_of(container)["FENCELINE_WORKER_GRACE_PERIOD"]["value"])
        assert grace + 3 + 10 < spec["terminationGracePeriodSeconds"]  # SIGKILL 3 s on, 10 s to report
