"""The launcher end to end: a real server, the emulated Kubernetes API, the test kubelet, and
`fenceline launcher` as a process."""

import json
import subprocess
import sys

import yaml

from tests.support.agents import REPO, settled
from tests.support.api import Operator, json_of
from tests.support.kubernetes import NEVER_PULLS, image_task
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until


def one_pod(cluster, what: str = "the Pod") -> dict:
    return wait_until(lambda: (p := cluster.pods()) and len(p) == 1 and p[0], what)


class TestOnePodPerAttempt:
    def test_an_image_task_runs_as_its_own_pod_labelled_with_its_attempt(self, serve, cluster, kubelet, launchers):
        server = serve()
        operator = Operator(server.client())
        launcher = launchers(server)
        operator.create_run(image_task("t", "echo:hello from the pod", "wait:go", "echo:bye"))
        pod = one_pod(cluster)
        ti = operator.find_ti("t")
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels["fenceline.io/task-id"] == "t" and labels["fenceline.io/run-id"] == "run"
        epoch = str(ti["attempt_epoch"])
        assert (labels["fenceline.io/try-number"], labels["fenceline.io/attempt-epoch"]) == ("1", epoch)
        assert labels["fenceline.io/launcher"] == "launcher-1"
        assert annotations["fenceline.io/ti-id"] == ti["ti_id"] and annotations["fenceline.io/map-index"] == "-1"
        spec = pod["spec"]
        assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert env["FENCELINE_TI_ID"] == ti["ti_id"] and env["TRACEPARENT"].startswith("00-")
        assert env["FENCELINE_FENCING_TOKEN"] == epoch and annotations["fenceline.io/fencing-token"] == epoch
        credentials = [n for n in env if ("TOKEN" in n or "PASSWORD" in n) and n != "FENCELINE_FENCING_TOKEN"]
        assert not credentials, "the fencing token is a number, not a credential; nothing else of the kind"
        assert "eyJ" not in str(pod), "no token of any kind inside the Pod"

        wait_until(lambda: operator.find_ti("t")["state"] == "running", "running once it started")
        kubelet.open("go")
        done = settled(operator)
        assert (done["state"], done["try_number"]) == ("success", 1)
        wait_until(lambda: not cluster.pods(), "the Pod deleted once its outcome was delivered")
        log = operator.log(ti["ti_id"])
        assert "hello from the pod\nbye\n" in log
        assert "[fenceline-launcher] the container exited with status 0: reporting success" in log
        assert launcher.stop() == 0

    def test_pod_spec_prints_the_pod_the_launcher_created_for_the_same_work_item(self, serve, cluster, kubelet,
                                                                                launchers):
        """Contract 9.6: the manifest a user inspects is the one that runs, TRACEPARENT included."""
        server = serve()
        operator = Operator(server.client())
        launcher = launchers(server, "--service-account", "etl")
        task = image_task("t", "wait:go")
        task["payload"].update(env={"MODE": "full"}, timeout_seconds=60, resources={"cpu": "100m", "memory": "64Mi"})
        operator.create_run(task)
        created = one_pod(cluster)
        [record] = wait_until(lambda: list((launcher.state_dir / "attempts").glob("*.json")), "the attempt record")
        held = json.loads(record.read_text())
        work_item = {k: held[k] for k in ("payload", "correlation", "attempt_token")}  # as the claim answered it
        printed = subprocess.run(
            [sys.executable, "-m", "app.cli", "launcher", "pod-spec", "-", "--namespace", "tasks",
             "--seat", "launcher-1", "--service-account", "etl"],
            input=json.dumps({"items": [work_item]}), capture_output=True, text=True, cwd=REPO, timeout=60)
        assert printed.returncode == 0, printed.stderr
        # What the API server and the kubelet added to the Pod the launcher sent.
        server_side = ("uid", "resourceVersion", "creationTimestamp")
        created["metadata"] = {k: v for k, v in created["metadata"].items() if k not in server_side}
        created["spec"] = {k: v for k, v in created["spec"].items() if k != "nodeName"}
        created.pop("status")
        assert yaml.safe_load(printed.stdout) == created
        env = {e["name"]: e["value"] for e in created["spec"]["containers"][0]["env"]}
        assert env["TRACEPARENT"].startswith("00-") and env["MODE"] == "full"
        kubelet.open("go")
        assert settled(operator)["state"] == "success"


def attempts(operator, ti_id: str) -> list[tuple]:
    return [(a["try_number"], a["attempt_epoch"], a["outcome_kind"], a["reason"]) for a in operator.attempts(ti_id)]


class TestOutcomes:
    def test_a_non_zero_exit_spends_a_try_and_each_try_has_its_own_pod(self, serve, cluster, kubelet, launchers):
        server = serve()
        operator = Operator(server.client())
        launchers(server)
        operator.create_run(image_task("t", "echo:boom", "exit:3", retries=1))
        done = settled(operator)
        assert (done["state"], done["try_number"], done["infra_attempts"]) == ("failed", 2, 0)
        assert [(t, kind) for t, _, kind, _ in attempts(operator, done["ti_id"])] == [(1, "app"), (2, "app")]
        # the runner deletes a Pod after its outcome is delivered: the second may not be gone yet
        wait_until(lambda: len(set(cluster.deletes())) == 2, "one Pod per try, each deleted after its outcome")
        assert "the container exited with status 3: reporting failed" in operator.log(done["ti_id"], 2)

    def test_oom_killed_and_evicted_pods_are_replaced_on_the_same_try_with_a_new_epoch_and_pod(
            self, serve, cluster, kubelet, launchers):
        server = serve()
        operator = Operator(server.client())
        launchers(server)
        operator.create_run(
            image_task("oom", "epoch:1:echo:first pod", "epoch:1:oom", "echo:second pod"),
            image_task("evicted", "epoch:1:echo:first pod", "epoch:1:wait:never", "echo:second pod"))
        first = wait_until(lambda: [p for p in cluster.pods("fenceline.io/task-id=evicted")
                                    if p["status"].get("phase") == "Running"], "the Pod to be evicted")[0]
        kubelet.evict(first["metadata"]["name"])
        for task_id, reason in (("oom", "oom_killed"), ("evicted", "evicted")):
            done = settled(operator, task_id)
            assert (done["state"], done["try_number"], done["infra_attempts"]) == ("success", 1, 1), task_id
            [(_, e1, infra, why), (_, e2, ok, _)] = attempts(operator, done["ti_id"])
            assert (infra, why, ok) == ("infra", reason, "success") and e2 > e1
            log = operator.log(done["ti_id"])  # the collapsed try: both epochs, in order
            assert log.index("first pod") < log.index("second pod"), log
            airflow = json_of(operator.get(f"/api/v2/dags/dag/dagRuns/run/taskInstances/{task_id}/logs/1",
                                           params={"full_content": "true"}))
            lines = [str(m.get("event")) if isinstance(m, dict) else str(m) for m in airflow["content"]]
            assert lines.index("first pod") < lines.index("second pod"), lines
        names = wait_until(lambda: len(set(n := cluster.deletes())) == 4 and n,
                           "a new Pod for each re-placed attempt, each deleted after its outcome")
        assert first["metadata"]["name"] in names

    def test_an_image_that_never_pulls_is_dispatch_failed_within_its_deadline(self, serve, cluster, kubelet,
                                                                             launchers):
        server = serve()
        operator = Operator(server.client())
        launchers(server, "--start-deadline", "1")
        operator.create_run({**image_task("t", max_infra_attempts=0), "payload": {"image": NEVER_PULLS}})
        done = settled(operator)  # without the deadline the Pod would wait for its image forever
        assert (done["state"], done["last_failure_reason"]) == ("infra_failed", "dispatch_failed")
        assert done["try_number"] == 1
        wait_until(lambda: not cluster.pods(), "the Pod deleted")

    def test_a_termination_message_reschedules(self, serve, cluster, kubelet, launchers):
        server = serve()
        operator = Operator(server.client())
        launchers(server)
        when = "2099-01-01T00:00:00+00:00"
        message = json.dumps({"state": "rescheduled", "reschedule_at": when})
        operator.create_run(image_task("t", f"message:{message}", "exit:0"))
        ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "up_for_reschedule" and t, "the deferral")
        assert ti["try_number"] == 1

    def test_a_success_in_the_termination_message_wins_over_a_killed_container(self, serve, cluster, kubelet,
                                                                            launchers):
        """#543: the task wrote {"state": "success"}, then was killed (exit 137) before it exited."""
        server = serve()
        operator = Operator(server.client())
        launchers(server)
        operator.create_run(image_task("t", "echo:work done", 'message:{"state": "success"}', "exit:137", retries=1))
        done = settled(operator)
        assert (done["state"], done["try_number"]) == ("success", 1), "no try spent"
        assert attempts(operator, done["ti_id"]) == [(1, 1, "success", None)]
        assert "the termination message records success" in operator.log(done["ti_id"])


class TestTheLabelFence:
    def test_a_pod_labelled_try_1_with_no_epoch_never_settles_the_attempt_at_epoch_1(
            self, serve, cluster, kubelet, launchers):
        """#1130: an epoch-less Pod is epoch 0; the task instance is at try 1, epoch 1."""
        server = serve()
        operator = Operator(server.client())
        launchers(server)
        operator.create_run(image_task("t", "wait:go", "echo:the live attempt's Pod"))
        live = one_pod(cluster)
        ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "running")
        assert (ti["try_number"], ti["attempt_epoch"]) == (1, 1)
        # The same attempt's Pod as a launcher before epochs wrote it: no attempt-epoch label.
        legacy = json.loads(json.dumps(live))
        legacy["metadata"] = {"name": "legacy-pod", "labels": {
            k: v for k, v in live["metadata"]["labels"].items() if k != "fenceline.io/attempt-epoch"},
            "annotations": live["metadata"]["annotations"]}
        legacy["spec"]["containers"][0]["args"] = ["echo:legacy", "exit:0"]
        legacy.pop("status")
        cluster.create(legacy)
        wait_until(lambda: cluster.pod("legacy-pod") is None, "the sweep to delete the epoch-0 Pod")
        assert operator.find_ti("t")["state"] == "running", "the epoch-0 Pod settled nothing"
        kubelet.open("go")
        done = settled(operator)
        assert done["state"] == "success"
        assert attempts(operator, done["ti_id"]) == [(1, 1, "success", None)]
        assert "legacy" not in operator.log(done["ti_id"])

    def test_should_terminate_deletes_the_attempts_pod_at_once(self, serve, cluster, kubelet, launchers):
        server = serve()
        operator = Operator(server.client())
        launchers(server)
        operator.create_run(image_task("t", "epoch:1:wait:never", "echo:done"))
        old = one_pod(cluster)
        ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "running")
        assert operator.post(f"/v1/task-instances/{ti['ti_id']}/clear").status_code == 200
        wait_until(lambda: old["metadata"]["name"] in cluster.deletes(), "the superseded attempt's Pod deleted")
        done = settled(operator)
        assert done["state"] == "success" and done["attempt_epoch"] > ti["attempt_epoch"]


class TestKubernetesApiLost:
    def test_a_lost_api_server_settles_nothing_and_the_reaped_attempts_pod_is_deleted(
            self, serve, cluster, kubelet, launchers, tmp_path):
        server = serve(agent_lost_after_seconds=1.0)
        operator = Operator(server.client())
        with TcpProxy("127.0.0.1", int(cluster.url.rsplit(":", 1)[1])) as proxy:
            kubeconfig = tmp_path / "via-proxy"
            kubeconfig.write_text(cluster.kubeconfig.read_text().replace(cluster.url, f"http://127.0.0.1:{proxy.port}"))
            launcher = launchers(server, "--start-deadline", "30", kubeconfig=kubeconfig)
            operator.create_run(image_task("t", "epoch:1:wait:never", "echo:done"))
            old = one_pod(cluster)
            ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "running")
            proxy.cut()
            wait_until(lambda: "Kubernetes API unreachable" in launcher.output, "the launcher to lose the API server")
            wait_until(lambda: operator.reap().get("agent_lost"), "the attempt's heartbeats to stop and the reaper")
            assert operator.attempts(ti["ti_id"])[0]["reason"] == "agent_lost"
            assert cluster.pod(old["metadata"]["name"]) is not None, "nothing was deleted or settled meanwhile"
            proxy.restore()
            wait_until(lambda: old["metadata"]["name"] in cluster.deletes(), "the reaped attempt's Pod deleted")
            done = settled(operator)
        assert (done["state"], done["try_number"], done["infra_attempts"]) == ("success", 1, 1)


class TestRestart:
    def test_a_restarted_launcher_adopts_its_running_pods_and_each_settles_once(
            self, serve, cluster, kubelet, launchers):
        server = serve()
        operator = Operator(server.client())
        first = launchers(server)
        operator.create_run(image_task("a", "echo:a started", "wait:a", "echo:a done"),
                            image_task("b", "echo:b started", "wait:b", "echo:b done"))
        for task_id in "ab":
            wait_until(lambda: operator.find_ti(task_id)["state"] == "running", f"{task_id} running")  # noqa: B023
        wait_until(lambda: all("started" in operator.log(operator.find_ti(t)["ti_id"]) for t in "ab"), "first lines")
        pods = {p["metadata"]["uid"] for p in cluster.pods()}
        first.kill()
        again = launchers(server)
        wait_until(lambda: again.output.count("adopting Pod") == 2, "both Pods adopted")
        wait_until(lambda: "re-attached to execution" in again.output, "the re-attachment to its own execution")
        assert {p["metadata"]["uid"] for p in cluster.pods()} == pods, "no running Pod killed or replaced"
        kubelet.open("a")
        kubelet.open("b")
        for task_id in "ab":
            done = settled(operator, task_id)
            assert attempts(operator, done["ti_id"]) == [(1, 1, "success", None)]
            log = operator.log(done["ti_id"])
            assert log.count(f"{task_id} started") == 1 and log.count(f"{task_id} done") == 1, log
        assert len(json_of(operator.get("/v1/seats/launcher-1/executions"))["items"]) == 1, "never superseded"
        wait_until(lambda: not cluster.pods(), "both Pods deleted")
        assert again.stop() == 0

    def test_a_launcher_with_a_new_state_directory_takes_the_seat_over_and_deletes_the_old_pods(
            self, serve, cluster, kubelet, launchers):
        server = serve()
        operator = Operator(server.client())
        first = launchers(server)
        operator.create_run(image_task("t", "epoch:1:wait:never", "echo:done"))
        old = one_pod(cluster)
        wait_until(lambda: operator.find_ti("t")["state"] == "running", "running")
        first.kill()
        again = launchers(server, state="new-volume")  # the same seat, its volume lost
        wait_until(lambda: "taking the seat over" in again.output, "the take-over")
        wait_until(lambda: old["metadata"]["name"] in cluster.deletes(), "the sweep of the Pod no attempt holds")
        wait_until(lambda: operator.reap().get("worker_lost"), "the old execution's attempt re-placed")
        done = settled(operator)
        assert [(kind, why) for _, _, kind, why in attempts(operator, done["ti_id"])] == [
            ("infra", "worker_lost"), ("success", None)]
        [gone, current] = json_of(operator.get("/v1/seats/launcher-1/executions"))["items"]
        assert current["previous_execution_id"] == gone["execution_id"]
        assert again.stop() == 0
