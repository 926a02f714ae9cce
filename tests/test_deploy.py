"""What ships to run fenceline elsewhere: the container image's Dockerfile, docker-compose.yml,
the Kubernetes kustomize base and the Prometheus scrape example.

No Docker engine or cluster runs here, so each is checked by the tools that read it: hadolint
lints the Dockerfile, check-jsonschema holds docker-compose.yml to the compose specification,
and `kubectl kustomize` renders the base, whose objects are then read field by field.
"""

import inspect
import os
import re
import tomllib
from typing import Any

import pytest
import yaml

from app.execution.schemas import MAX_CLAIM_WAIT_SECONDS
from app.launcher.agent import ALIVE
from app.worker.api import Api
from app.worker.context import DELIVERY_AFTER_HALT_SECONDS
from app.worker.settings import POD_ENV
from app.worker.task import KILL_AFTER
from tests.support.deploy import REPO, env_of, one, pod_spec, run, tool

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN", "DATABASE_URL")


# The container image -------------------------------------------------------------------------

def stages(dockerfile: str) -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), one list per stage."""
    joined = dockerfile.replace("\\\n", " ")
    found: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("ARG") and not found:
            continue
        if line.startswith("FROM "):
            found.append([])
        found[-1].append(line)
    return found


def extras(instruction: str) -> set[str]:
    """The extras a `pip install … '.[a,b]'` instruction installs."""
    match = re.search(r"\.\[([a-z0-9,]+)\]", instruction)
    return set(match.group(1).split(",")) if match else set()


class TestDockerfile:
    def test_hadolint_finds_nothing(self):
        done = run(tool("hadolint"), "Dockerfile")
        assert done.returncode == 0, done.stdout + done.stderr

    def test_the_final_stage_runs_as_a_user_with_no_compiler_and_checks_liveness(self):
        build, final = stages((REPO / "Dockerfile").read_text())
        assert any("pip install" in i for i in build)
        assert not any("pip install" in i or "gcc" in i or "build-essential" in i for i in final)
        [user] = [i for i in final if i.startswith("USER ")]
        assert user.split()[1].split(":")[0] not in ("0", "root")
        [check] = [i for i in final if i.startswith("HEALTHCHECK ")]
        assert "/health/live" in check
        copied = " ".join(i for i in build if i.startswith("COPY "))
        for needed in ("app", "migrations", "alembic.ini"):  # the migrations and templates go inside
            assert needed in copied
        assert "COPY --from=build /opt/fenceline /opt/fenceline" in final

    def test_the_image_installs_the_lock_and_no_dev_tool(self):
        build, _ = stages((REPO / "Dockerfile").read_text())
        [install] = [i for i in build if "pip install" in i]
        copied = " ".join(i for i in build if i.startswith("COPY "))
        assert "-c constraints.txt" in install and "constraints.txt" in copied
        assert "dev" not in extras(install)
        assert {"kubernetes", "s3", "otel"} <= extras(install)
        assert "!constraints.txt" in (REPO / ".dockerignore").read_text().splitlines()

    def test_the_build_context_holds_what_the_image_copies(self):
        ignore = (REPO / ".dockerignore").read_text().splitlines()
        for needed in ("app/", "migrations/", "alembic.ini", "pyproject.toml"):
            assert f"!{needed}" in ignore


class TestCompose:
    @pytest.fixture(scope="class")
    def compose(self) -> dict[str, Any]:
        return yaml.safe_load((REPO / "docker-compose.yml").read_text())

    def test_it_follows_the_compose_specification(self):
        done = run(tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "docker-compose.yml")
        assert done.returncode == 0, done.stdout + done.stderr

    def test_two_replicas_of_the_built_image_on_their_own_ports_after_a_healthy_database(self, compose):
        services = compose["services"]
        replicas = {name: s for name, s in services.items() if "serve" in (s.get("command") or [])}
        assert len(replicas) == 2
        ports = [p for s in replicas.values() for p in s["ports"]]
        assert len({p.split(":")[0] for p in ports}) == 2
        for service in replicas.values():
            assert service["build"] == "."
            assert "--no-migrate" in service["command"]
            assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
            assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
            assert "/health/live" in " ".join(service["healthcheck"]["test"])
        assert services["migrate"]["command"] == ["migrate"]
        assert "healthcheck" in services["postgres"]
        for name, service in services.items():
            assert service.get("restart") in ("always", "unless-stopped", "on-failure"), name

    def test_no_secret_is_baked_in(self, compose):
        for name, service in compose["services"].items():
            for key, value in (service.get("environment") or {}).items():
                if any(word in key for word in SECRET_WORDS):
                    # Unset (passed through from the user's environment) or read from it.
                    assert value is None or "${" in value, f"{name}: {key}={value}"
                    if value is not None and "PASSWORD" in key:
                        assert ":?" in value  # required, never defaulted
            if url := (service.get("environment") or {}).get("DATABASE_URL"):
                assert "${POSTGRES_PASSWORD:?" in url  # the database's password, read from the environment


# The Kubernetes base ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/kubernetes`, parsed."""
    done = run(tool("kubectl"), "kustomize", "deploy/kubernetes")
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


class TestKubernetes:
    def test_every_object_of_the_base(self, rendered):
        assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered) == [
            ("ConfigMap", "fenceline"),
            ("Deployment", "fenceline-server"),
            ("Job", "fenceline-migrate"),
            ("NetworkPolicy", "fenceline-server"),
            ("NetworkPolicy", "fenceline-worker"),
            ("PodDisruptionBudget", "fenceline-server"),
            ("PodDisruptionBudget", "fenceline-worker"),
            ("Service", "fenceline"),
            ("Service", "fenceline-worker"),
            ("StatefulSet", "fenceline-worker"),
        ]
        for o in rendered:
            assert o["metadata"]["labels"]["app.kubernetes.io/name"] == "fenceline"
            assert "namespace" not in o["metadata"]  # the namespace is the user's choice

    def test_every_container_runs_this_version_unprivileged(self, rendered):
        for workload in (o for o in rendered if o["kind"] in ("Deployment", "StatefulSet", "Job")):
            spec = pod_spec(workload)
            assert spec["securityContext"]["runAsNonRoot"] is True
            assert spec["automountServiceAccountToken"] is False
            for container in spec.get("initContainers", []) + spec["containers"]:
                assert container["image"] == f"fenceline:{VERSION}"
                assert container["securityContext"]["allowPrivilegeEscalation"] is False
                assert container["securityContext"]["readOnlyRootFilesystem"] is True
                for name, entry in env_of(container).items():
                    if any(word in name for word in SECRET_WORDS):
                        assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], name

    def test_the_server_deployment(self, rendered):
        server = one(rendered, "Deployment", "fenceline-server")
        assert server["spec"]["replicas"] == 2
        spec = pod_spec(server)
        [container] = spec["containers"]
        assert container["args"][:1] == ["serve"] and "--no-migrate" in container["args"]
        assert container["ports"] == [{"name": "http", "containerPort": 8000}]
        assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": "http"}
        assert container["startupProbe"]["httpGet"] == {"path": "/health/live", "port": "http"}
        env = env_of(container)
        assert env["FENCELINE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "fenceline", "key": "database-url"}
        assert {"name": "fenceline"} in [e["configMapRef"] for e in container["envFrom"]]
        # It waits for the migration Job rather than crash on a schema behind head.
        [wait] = spec["initContainers"]
        assert "fenceline migrate --check" in " ".join(wait["command"])
        annotations = server["spec"]["template"]["metadata"]["annotations"]
        assert (annotations["prometheus.io/scrape"], annotations["prometheus.io/path"]) == ("true", "/metrics")

    def test_the_budget_and_the_service_select_the_server_pods(self, rendered):
        labels = one(rendered, "Deployment", "fenceline-server")["spec"]["template"]["metadata"]["labels"]
        budget = one(rendered, "PodDisruptionBudget", "fenceline-server")
        assert budget["spec"]["minAvailable"] == 1
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
        service = one(rendered, "Service", "fenceline")
        assert service["spec"]["selector"].items() <= labels.items()
        assert service["spec"]["ports"][0]["targetPort"] == "http"

    def test_the_migration_job(self, rendered):
        job = one(rendered, "Job", "fenceline-migrate")
        spec = pod_spec(job)
        [container] = spec["containers"]
        assert container["args"] == ["migrate"]
        assert spec["restartPolicy"] in ("OnFailure", "Never")
        assert env_of(container)["FENCELINE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "fenceline"

    def test_each_worker_pod_is_a_seat_that_admits_itself_from_the_downward_api(self, rendered):
        workers = one(rendered, "StatefulSet", "fenceline-worker")
        assert one(rendered, "Service", workers["spec"]["serviceName"])["spec"]["clusterIP"] == "None"
        spec = pod_spec(workers)
        [container] = spec["containers"]
        assert container["args"] == ["worker", "--runtime", "kubernetes"]
        env = env_of(container)
        fields = {"pod_namespace": "metadata.namespace", "pod_name": "metadata.name", "pod_uid": "metadata.uid"}
        for field, variable in POD_ENV.items():  # the names the worker reads
            assert env[variable]["valueFrom"]["fieldRef"]["fieldPath"] == fields[field]
        assert env["FENCELINE_LAUNCHER_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "fenceline-launcher", "key": "token"}
        assert env["FENCELINE_SERVER"]["value"] == "http://" + one(rendered, "Service", "fenceline")["metadata"]["name"]
        # The state directory is a volume: it outlives a container restart within the Pod.
        state = env["FENCELINE_WORKER_STATE_DIR"]["value"]
        assert any(state.startswith(m["mountPath"]) for m in container["volumeMounts"])
        # SIGTERM: the grace period, the stop of what still runs, and its report fit in the
        # time Kubernetes gives before SIGKILL.
        grace = float(env["FENCELINE_WORKER_GRACE_PERIOD"]["value"])
        assert grace + KILL_AFTER + DELIVERY_AFTER_HALT_SECONDS < spec["terminationGracePeriodSeconds"]

    def test_a_worker_is_alive_while_its_claim_loop_turns_and_drained_one_at_a_time(self, rendered):
        workers = one(rendered, "StatefulSet", "fenceline-worker")
        [container] = pod_spec(workers)["containers"]
        env = env_of(container)
        # The probe finds the state directory in the container's environment, as the worker does.
        for probe in ("startupProbe", "livenessProbe"):
            assert container[probe]["exec"]["command"][:3] == ["fenceline", "worker", "alive"]
            assert "--state-dir" not in container[probe]["exec"]["command"]
        assert "FENCELINE_WORKER_STATE_DIR" in env
        # Its --max-age outlasts the longest turn of a live loop (a claim's longest wait and its
        # request's timeout), and a drain (SIGTERM) ends before a stale file fails it.
        liveness = container["livenessProbe"]
        max_age = float(liveness["exec"]["command"][-1])
        assert MAX_CLAIM_WAIT_SECONDS + inspect.signature(Api).parameters["timeout"].default < max_age
        grace = float(env["FENCELINE_WORKER_GRACE_PERIOD"]["value"])
        assert grace + KILL_AFTER + DELIVERY_AFTER_HALT_SECONDS < max_age
        # Start-up (admission) may wait minutes for a server that is not up yet.
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
        budget = one(rendered, "PodDisruptionBudget", "fenceline-worker")
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["selector"]["matchLabels"].items() <= workers["spec"]["template"]["metadata"][
            "labels"].items()


@pytest.fixture(scope="module")
def with_launcher(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """An overlay of the base with the launcher component, rendered."""
    overlay = tmp_path_factory.mktemp("overlay")
    base = os.path.relpath(REPO / "deploy" / "kubernetes", overlay)  # kustomize takes no absolute paths
    (overlay / "kustomization.yaml").write_text(f"resources: [{base}]\ncomponents: [{base}/launcher]\n")
    done = run(tool("kubectl"), "kustomize", str(overlay))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


class TestLauncherComponent:
    def test_it_adds_the_launcher_and_its_rights_to_the_base(self, rendered, with_launcher):
        added = {(o["kind"], o["metadata"]["name"]) for o in with_launcher} - {
            (o["kind"], o["metadata"]["name"]) for o in rendered}
        assert added == {("ServiceAccount", "fenceline-launcher"), ("Role", "fenceline-launcher"),
                         ("RoleBinding", "fenceline-launcher"), ("PersistentVolumeClaim", "fenceline-launcher-state"),
                         ("Deployment", "fenceline-launcher")}
        for o in with_launcher:
            assert "namespace" not in o["metadata"]

    def test_the_role_grants_only_what_the_launcher_calls(self, with_launcher):
        rules = one(with_launcher, "Role", "fenceline-launcher")["rules"]
        assert sorted((r["resources"][0], sorted(r["verbs"])) for r in rules) == [
            ("pods", ["create", "delete", "list"]), ("pods/log", ["get"])]
        binding = one(with_launcher, "RoleBinding", "fenceline-launcher")
        assert binding["roleRef"]["name"] == "fenceline-launcher"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fenceline-launcher"}]

    def test_one_launcher_with_a_lasting_state_directory_and_probes(self, with_launcher):
        launcher = one(with_launcher, "Deployment", "fenceline-launcher")
        assert (launcher["spec"]["replicas"], launcher["spec"]["strategy"]["type"]) == (1, "Recreate")
        spec = pod_spec(launcher)
        assert spec["serviceAccountName"] == "fenceline-launcher" and spec["securityContext"]["runAsNonRoot"]
        [container] = spec["containers"]
        assert container["args"] == ["launcher"] and container["image"] == f"fenceline:{VERSION}"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        env = env_of(container)
        assert env["FENCELINE_LAUNCHER_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "fenceline-launcher",
                                                                               "key": "token"}
        state = env["FENCELINE_LAUNCHER_STATE_DIR"]["value"]
        [mount] = [m for m in container["volumeMounts"] if state.startswith(m["mountPath"])]
        [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        assert volume["persistentVolumeClaim"]["claimName"] == "fenceline-launcher-state"
        for probe in ("startupProbe", "livenessProbe"):
            assert f"{state}/{ALIVE}" in " ".join(container[probe]["exec"]["command"])
        port = env["FENCELINE_LAUNCHER_METRICS_PORT"]["value"]  # its overlap metric, scraped by annotation
        assert container["ports"] == [{"name": "metrics", "containerPort": int(port)}]
        annotations = launcher["spec"]["template"]["metadata"]["annotations"]
        assert (annotations["prometheus.io/scrape"], annotations["prometheus.io/port"]) == ("true", port)

    def test_the_image_has_the_kubernetes_client(self):
        build, _ = stages((REPO / "Dockerfile").read_text())
        assert any("pip install" in i and "kubernetes" in extras(i) for i in build)


class TestPrometheusScrape:
    def test_the_example_sends_the_metrics_token_from_its_secret(self):
        config = yaml.safe_load((REPO / "deploy" / "prometheus" / "scrape.yml").read_text())
        [job] = config["scrape_configs"]
        assert job["authorization"]["credentials_file"].startswith("/etc/prometheus/secrets/fenceline-metrics/")
        assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
        kept = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
        assert any("prometheus_io_scrape" in " ".join(r["source_labels"]) for r in kept)
