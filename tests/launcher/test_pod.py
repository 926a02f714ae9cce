"""The Pod of an attempt and the label fence (contract 9.2, 9.3): the pure parts on Pod
objects, and the teardown against the emulated API server."""

import io
import json
import subprocess
import sys
import uuid

import pytest
import yaml

from app.cli import main
from app.launcher.kube import Kube, load_configuration
from app.launcher.pod import (
    epoch_of,
    is_attempt_pod,
    label_safe,
    manifest,
    pod_name,
    superseded_by,
    ti_selector,
    try_selector,
)
from app.launcher.runner import stamp_order, teardown
from app.telemetry.traceparent import run_traceparent
from tests.support.agents import REPO
from tests.support.kubernetes import IMAGE, NAMESPACE

TI = str(uuid.uuid4())


def correlation(try_number: int = 1, epoch: int = 1, **fields) -> dict:
    return {"ti_id": TI, "dag_id": "etl", "run_id": "manual__2026-11-30T00:00:00+00:00", "task_id": "load",
            "map_index": 3, "try_number": try_number, "attempt_epoch": epoch, "tenant_id": "acme",
            "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", **fields}


def item(try_number: int = 1, epoch: int = 1) -> dict:
    return {"payload": {"image": IMAGE, "command": ["python", "-m", "etl"], "args": ["--day", "2026-11-30"],
                        "env": {"MODE": "full", "FENCELINE_TRY_NUMBER": "99"},
                        "resources": {"cpu": "500m", "memory": "1Gi", "gpu": 1}, "timeout_seconds": 90.5},
            "correlation": correlation(try_number, epoch), "attempt_token": "eyJ.secret.token"}


class TestLabels:
    def test_a_label_safe_value_is_kept_and_any_other_gets_a_hash(self):
        assert label_safe("etl_daily.v2") == "etl_daily.v2"
        made = label_safe("manual__2026-11-30T00:00:00+00:00")
        assert len(made) <= 63 and made != label_safe("manual__2026-11-30T00:00:00-00:00")
        assert label_safe("x" * 64) != label_safe("x" * 65) and len(label_safe("x" * 300)) <= 63
        assert label_safe("-1")[0].isalnum()

    def test_a_pod_name_is_unique_per_attempt_and_a_dns_label(self):
        names = {pod_name(correlation(t, e)) for t in (1, 2) for e in (1, 2)}
        assert len(names) == 4 and all(len(n) <= 63 and n.islower() for n in names)

    def test_the_manifest(self):
        pod = manifest(item(), namespace="tasks", launcher="launcher-1", traceparent="00-4bf9-01")
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels["fenceline.io/try-number"] == "1" and labels["fenceline.io/attempt-epoch"] == "1"
        assert labels["fenceline.io/launcher"] == "launcher-1" and labels["fenceline.io/tenant-id"] == "acme"
        assert annotations["fenceline.io/run-id"] == "manual__2026-11-30T00:00:00+00:00"
        assert annotations["fenceline.io/ti-id"] == TI
        spec = pod["spec"]
        assert (spec["restartPolicy"], spec["automountServiceAccountToken"], spec["activeDeadlineSeconds"]) == (
            "Never", False, 91)
        [container] = spec["containers"]
        assert container["command"] == ["python", "-m", "etl"] and container["args"] == ["--day", "2026-11-30"]
        assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"},
                                          "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"}}
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["MODE"] == "full" and env["TRACEPARENT"] == "00-4bf9-01"
        assert env["FENCELINE_TRY_NUMBER"] == "1", "the payload cannot lie to the task about its attempt"
        assert (env["FENCELINE_FENCING_TOKEN"], env["FENCELINE_FENCE_KEY"]) == ("1", TI)
        assert annotations["fenceline.io/fencing-token"] == "1" and "fenceline.io/fencing-token" not in labels
        assert "secret" not in json.dumps(pod)


class TestTheFence:
    def test_a_pod_with_no_epoch_label_is_epoch_0(self):
        """#1130: labelled try 1 with no epoch label, it never matches try 1 epoch 1."""
        legacy = manifest(item(1, 1), namespace="tasks", launcher="l")
        del legacy["metadata"]["labels"]["fenceline.io/attempt-epoch"]
        assert epoch_of(legacy) == 0
        assert not is_attempt_pod(legacy, correlation(1, 1))
        assert is_attempt_pod(legacy, correlation(1, 0))

    def test_only_the_exact_attempt_matches(self):
        pod = manifest(item(2, 5), namespace="tasks", launcher="l")
        assert is_attempt_pod(pod, correlation(2, 5))
        for other in (correlation(2, 4), correlation(1, 5), correlation(2, 5, ti_id=str(uuid.uuid4())),
                      correlation(2, 5, task_id="other")):
            assert not is_attempt_pod(pod, other)

    def test_an_earlier_try_or_epoch_of_the_task_instance_is_superseded_whichever_launcher_made_it(self):
        current = correlation(2, 3)
        for earlier in ((1, 1), (1, 7), (2, 1), (2, 2)):
            assert superseded_by(manifest(item(*earlier), namespace="tasks", launcher="other"), current), earlier
        legacy = manifest(item(2, 3), namespace="tasks", launcher="l")
        del legacy["metadata"]["labels"]["fenceline.io/attempt-epoch"]
        assert superseded_by(legacy, current), "no epoch label: epoch 0"
        for not_earlier in ((2, 3), (2, 4), (3, 1)):
            assert not superseded_by(manifest(item(*not_earlier), namespace="tasks", launcher="l"), current)
        another_ti = manifest(item(1, 1), namespace="tasks", launcher="l")
        another_ti["metadata"]["annotations"]["fenceline.io/ti-id"] = str(uuid.uuid4())
        assert not superseded_by(another_ti, current)
        assert "try-number" not in ti_selector(current) and "task-id=load" in ti_selector(current)

    def test_the_try_selector_names_no_epoch(self):
        assert "attempt-epoch" not in try_selector(correlation()) and "try-number=1" in try_selector(correlation())


class ReplacingKube(Kube):
    """Between its listing and the delete, the Pod it listed is replaced by another of the
    same name (as a controller re-creating it would)."""

    def __init__(self, cluster, *args) -> None:
        super().__init__(*args)
        self.cluster = cluster

    def list(self, selector: str) -> list[dict]:
        listed = super().list(selector)
        for pod in listed:
            assert self.cluster.delete(pod["metadata"]["name"])
            self.cluster.create({k: v for k, v in pod.items() if k != "status"})
        return listed


class TestTeardown:
    @pytest.fixture
    def kube(self, cluster):
        kube = Kube(load_configuration(str(cluster.kubeconfig), None), NAMESPACE)
        yield kube
        kube.close()

    def test_of_two_pods_of_one_try_it_deletes_only_the_matching_epoch(self, cluster, kube):
        for epoch in (1, 2):
            kube.create(manifest(item(1, epoch), namespace=NAMESPACE, launcher="l"))
        legacy = manifest(item(1, 1), namespace=NAMESPACE, launcher="l")
        legacy["metadata"]["name"] = "legacy"
        del legacy["metadata"]["labels"]["fenceline.io/attempt-epoch"]
        kube.create(legacy)
        assert teardown(kube, correlation(1, 2)) == [pod_name(correlation(1, 2))]
        assert sorted(p["metadata"]["name"] for p in cluster.pods()) == sorted([pod_name(correlation(1, 1)), "legacy"])
        assert teardown(kube, correlation(1, 0)) == ["legacy"], "the epoch-less Pod is epoch 0's"

    def test_a_pod_replaced_between_list_and_delete_is_not_deleted(self, cluster, kube):
        kube.create(manifest(item(), namespace=NAMESPACE, launcher="l"))
        [before] = cluster.pods()
        replacing = ReplacingKube(cluster, load_configuration(str(cluster.kubeconfig), None), NAMESPACE)
        assert teardown(replacing, correlation()) == [], "the UID precondition refused the delete (409)"
        [after] = cluster.pods()
        assert after["metadata"]["name"] == before["metadata"]["name"]
        assert after["metadata"]["uid"] != before["metadata"]["uid"]
        replacing.close()


def test_log_timestamps_sort_in_time_order():
    assert stamp_order("2026-11-30T10:00:00.5Z") > stamp_order("2026-11-30T10:00:00.499999999Z")
    assert stamp_order("2026-11-30T10:00:01Z") > stamp_order("2026-11-30T10:00:00.9Z")


class TestCommandLine:
    def test_pod_spec_prints_the_pod_a_work_item_gets(self):
        done = subprocess.run([sys.executable, "-m", "app.cli", "launcher", "pod-spec", "-", "--namespace", "tasks",
                               "--seat", "launcher-1"],
                              input=json.dumps({"items": [item()]}), capture_output=True, text=True, cwd=REPO,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        pod = yaml.safe_load(done.stdout)
        assert pod == manifest(item(), namespace="tasks", launcher="launcher-1")
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["TRACEPARENT"] == run_traceparent(correlation()), "the run's trace, as the launcher's Pods carry"

    def test_pod_spec_takes_the_launchers_settings_of_the_pod(self, monkeypatch, capsys):
        monkeypatch.setenv("FENCELINE_LAUNCHER_NAMESPACE", "tasks")
        monkeypatch.setenv("FENCELINE_LAUNCHER_SEAT", "launcher-7")
        monkeypatch.setenv("FENCELINE_LAUNCHER_POD_SERVICE_ACCOUNT", "etl")
        monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(item())))
        assert main(["launcher", "pod-spec", "-"]) == 0
        printed = yaml.safe_load(capsys.readouterr().out)
        assert printed == manifest(item(), namespace="tasks", launcher="launcher-7", service_account="etl")

    def test_pod_spec_refuses_what_is_not_a_work_item(self, tmp_path, capsys):
        (tmp_path / "x.json").write_text('{"payload": {}}')
        assert main(["launcher", "pod-spec", str(tmp_path / "x.json")]) == 2
        assert "not a WorkItem" in capsys.readouterr().err

    @pytest.mark.parametrize(("flags", "says"), [
        (["--poll-interval", "0"], "--poll-interval: must be above 0, not 0"),
        (["--poll-interval", "soon"], "--poll-interval: 'soon' is not a number of seconds"),
        (["--concurrency", "0"], "--concurrency: must be at least 1, not 0"),
        (["--queues", ","], "--queues: must name at least one queue"),
        (["--replacement-wait", "0"], "--replacement-wait: must be above 0, not 0"),
        (["--metrics-port", "70000"], "--metrics-port: must be a TCP port, 1 to 65535, not 70000"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "no Kubernetes configuration"),
    ])
    def test_bad_settings_are_one_line_and_exit_2(self, flags, says, monkeypatch, capsys, tmp_path):
        monkeypatch.setenv("FENCELINE_ADMIN_PASSWORD", "x")
        assert main(["launcher", "--state-dir", str(tmp_path), *flags]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err

    def test_no_credential_is_one_line_and_exit_2(self, monkeypatch, capsys, tmp_path):
        for name in ("FENCELINE_ADMIN_PASSWORD", "FENCELINE_LAUNCHER_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        assert main(["launcher", "--state-dir", str(tmp_path)]) == 2
        assert "a credential is needed" in capsys.readouterr().err
