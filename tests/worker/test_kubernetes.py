"""`fenceline worker --runtime kubernetes`: the worker as a Pod of a StatefulSet, the Pod being
the seat. Each test runs the worker as a real process with the environment the Pod spec gives
it (deploy/kubernetes/worker.yaml: the downward API's namespace, name and UID, a launcher
token and no operator password) against a live server, on SQLite and on PostgreSQL: here the
server's admission rules (idempotent replay, pod-uid-reused, stale-predecessor) are the point.
"""

import argparse
import logging
import threading
import uuid
from pathlib import Path

import pytest

from app.worker.api import Api, retrying
from app.worker.context import Context
from app.worker.kubernetes import admit_pod
from app.worker.settings import POD_ENV, add_arguments, from_args
from app.worker.state import StateDir
from tests.support.agents import GATED, python_task
from tests.support.api import Operator, assert_problem, json_of
from tests.support.waiting import wait_until

POD = "fenceline-worker-0"
NAMESPACE = "fenceline"


def pod_env(launcher_token: str, uid: str, name: str = POD) -> dict[str, str]:
    """The worker container's environment in deploy/kubernetes/worker.yaml."""
    return {"FENCELINE_ADMIN_PASSWORD": "", "FENCELINE_LAUNCHER_TOKEN": launcher_token,
            "FENCELINE_WORKER_RUNTIME": "kubernetes", "FENCELINE_POD_NAMESPACE": NAMESPACE,
            "FENCELINE_POD_NAME": name, "FENCELINE_POD_UID": uid}


def history(operator: Operator, seat: str = POD) -> list[dict]:
    return json_of(operator.get(f"/v1/seats/{seat}/executions"))["items"]


def running(operator: Operator, task_id: str = "t") -> dict:
    return wait_until(lambda: (t := operator.find_ti(task_id))["state"] == "running" and t, f"{task_id} to run")


class TestNewPod:
    def test_the_first_pod_of_a_seat_admits_itself_with_its_downward_api_identity(self, live_server, workers):
        operator = Operator(live_server.client())
        uid = str(uuid.uuid4())
        pod = workers(live_server, POD, extra_env=pod_env(operator.launcher_token(), uid))
        operator.create_run(python_task("t", "print('in the pod')"))
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")

        [execution] = history(operator)
        assert (execution["generation"], execution["previous_execution_id"]) == (1, None)
        assert execution["runtime_backend"] == "kubernetes"
        assert execution["runtime_target"] == {"pod_namespace": NAMESPACE, "pod_name": POD, "pod_uid": uid}
        assert operator.find_ti("t")["execution_id"] == execution["execution_id"]
        assert f"admitted Pod {NAMESPACE}/{POD} (uid {uid}) as seat {POD}" in pod.output
        assert pod.stop() == 0


class TestRestartedContainer:
    def test_it_re_attaches_to_its_own_execution_and_hands_back_what_it_ran(self, live_server, workers, tmp_path):
        operator = Operator(live_server.client())
        uid, gate = str(uuid.uuid4()), tmp_path / "gate"
        env = pod_env(operator.launcher_token(), uid)
        first = workers(live_server, POD, extra_env=env)
        operator.create_run(python_task("t", GATED, str(gate), retries=0))
        ti = running(operator)
        wait_until(lambda: "line 3" in operator.log(ti["ti_id"]), "its first lines")
        [admitted] = history(operator)
        first.kill()  # the container dies; the Pod (and its state volume) stays

        again = workers(live_server, POD, extra_env=env)  # the kubelet restarts it: same UID
        wait_until(lambda: "re-attached to its own execution after a container restart" in again.output,
                   "the re-attachment")
        assert history(operator) == [admitted], "no second execution, no supersession"
        assert "pod-uid-reused" not in again.output
        lost = operator.attempts(ti["ti_id"])[0]
        assert (lost["outcome_kind"], lost["reason"], str(lost["execution_id"])) == (
            "infra", "worker_lost", admitted["execution_id"])

        # Re-placed at once (no reaper involved), on the same execution, the same try.
        replaced = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running"
                              and t["attempt_epoch"] > ti["attempt_epoch"] and t, "the re-placed attempt")
        assert (replaced["execution_id"], replaced["try_number"], replaced["infra_attempts"]) == (
            admitted["execution_id"], 1, 1)
        gate.touch()
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
        log = operator.log(ti["ti_id"])
        assert "[fenceline-worker] the worker's container restarted while the task ran" in log
        assert again.stop() == 0

    def test_it_re_attaches_with_an_empty_state_directory(self, live_server, workers):
        """The server, not the volume, says who the Pod is."""
        operator = Operator(live_server.client())
        uid = str(uuid.uuid4())
        env = pod_env(operator.launcher_token(), uid)
        first = workers(live_server, POD, extra_env=env)
        wait_until(lambda: history(operator), "the admission")
        first.kill()
        again = workers(live_server, POD, extra_env=env, state="fresh-volume")
        wait_until(lambda: "re-attached" in again.output, "the re-attachment")
        [execution] = history(operator)
        operator.create_run(python_task("t", "print('after the restart')"))
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
        assert operator.find_ti("t")["execution_id"] == execution["execution_id"]
        # A plain second admission of the same Pod is what the Idempotency-Key avoids.
        body = {"swarm": "default", "runtime_backend": "kubernetes", "previous_execution_id": execution["execution_id"],
                "runtime_target": {"pod_namespace": NAMESPACE, "pod_name": POD, "pod_uid": uid}}
        assert_problem(operator.post(f"/v1/seats/{POD}/executions", json=body), 409, "pod-uid-reused")
        assert again.stop() == 0

    def test_a_superseded_pod_stops_instead_of_fighting(self, live_server, workers):
        operator = Operator(live_server.client())
        token, uid = operator.launcher_token(), str(uuid.uuid4())
        first = workers(live_server, POD, extra_env=pod_env(token, uid))
        wait_until(lambda: history(operator), "the admission")
        first.kill()
        replacement = workers(live_server, POD, extra_env=pod_env(token, str(uuid.uuid4())), state="new-pod")
        wait_until(lambda: len(history(operator)) == 2, "the replacement's admission")
        stale = workers(live_server, POD, extra_env=pod_env(token, uid))  # the old Pod's container, restarted
        assert stale.proc.wait(timeout=30) == 4
        assert "was superseded; a newer execution holds the seat" in stale.output
        assert len(history(operator)) == 2
        assert replacement.stop() == 0


class TestReplacedPod:
    def test_a_new_pod_supersedes_the_seats_execution_and_takes_over_its_work(self, live_server, workers, tmp_path):
        operator = Operator(live_server.client())
        token, gate = operator.launcher_token(), tmp_path / "gate"
        old_uid, new_uid = str(uuid.uuid4()), str(uuid.uuid4())
        old = workers(live_server, POD, extra_env=pod_env(token, old_uid))
        operator.create_run(python_task("t", GATED, str(gate), retries=0))
        ti = running(operator)
        old.kill()  # the node is lost; the StatefulSet makes the Pod again: same name, new UID

        new = workers(live_server, POD, extra_env=pod_env(token, new_uid), state="new-pod")
        wait_until(lambda: len(history(operator)) == 2, "the new Pod's admission")
        first, second = history(operator)
        assert (first["superseded"], first["runtime_target"]["pod_uid"]) == (True, old_uid)
        assert (second["generation"], second["previous_execution_id"]) == (2, first["execution_id"])
        assert second["runtime_target"] == {"pod_namespace": NAMESPACE, "pod_name": POD, "pod_uid": new_uid}
        assert "superseding " + first["execution_id"] in new.output

        assert operator.reap() == {"worker_lost": 1}  # the superseded Pod's work is re-placed
        replaced = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running"
                              and t["attempt_epoch"] > ti["attempt_epoch"] and t, "the re-placed attempt")
        assert (replaced["execution_id"], replaced["try_number"]) == (second["execution_id"], 1)
        gate.touch()
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
        assert new.stop() == 0


class RacingApi(Api):
    """The real client, except that right after the Pod reads the seat's history someone else
    admits the seat's next execution: the interleaving a retry on stale-predecessor is for."""

    def __init__(self, server: str, operator: Operator, races: int) -> None:
        super().__init__(server)
        self.operator, self.races = operator, races

    def seat_executions(self, launcher_token: str, seat: str) -> list[dict]:
        items = super().seat_executions(launcher_token, seat)
        if self.races:
            self.races -= 1
            self.operator.admit(seat, items[-1]["execution_id"] if items else None, swarm="default",
                                backend="kubernetes", target={"pod_namespace": NAMESPACE, "pod_name": seat})
        return items


class TestStalePredecessor:
    def test_an_admission_landing_in_between_is_read_again_and_superseded(self, live_server, tmp_path):
        operator = Operator(live_server.client())
        uid = str(uuid.uuid4())
        api = RacingApi(live_server.url, operator, races=2)
        ctx = Context(api=api, state=StateDir(tmp_path / "state"), settings=settings_of(pod_env("", uid), tmp_path),
                      log=logging.getLogger("test"))
        try:
            admitted, reattached = admit_pod(ctx, operator.launcher_token(), lambda call, _what: call())
        finally:
            api.close()
        executions = history(operator)
        assert [e["generation"] for e in executions] == [1, 2, 3]
        assert (admitted["generation"], admitted["previous_execution_id"], reattached) == (
            3, executions[1]["execution_id"], False)
        assert executions[2]["runtime_target"]["pod_uid"] == uid


class TestOneContainerTwice:
    def test_admissions_of_one_pod_at_once_all_get_its_one_execution(self, live_server, tmp_path):
        """A container that died with its admission in flight, and its restart's admission:
        real concurrent requests, the same key, one execution (and one supersession)."""
        operator = Operator(live_server.client())
        token, uid = operator.launcher_token(), str(uuid.uuid4())
        predecessor = operator.admit(POD, swarm="default", backend="kubernetes",
                                     target={"pod_namespace": NAMESPACE, "pod_name": POD, "pod_uid": "old-pod"})
        settings = settings_of(pod_env("", uid), tmp_path)
        start, results, errors = threading.Barrier(4), [], []

        def admit(n: int) -> None:
            api = Api(live_server.url)
            ctx = Context(api=api, state=StateDir(tmp_path / f"state-{n}"), settings=settings,
                          log=logging.getLogger("test"))
            try:
                start.wait()
                results.append(admit_pod(ctx, token, lambda call, what: retrying(call, what=what)))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                api.close()

        threads = [threading.Thread(target=admit, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors and len(results) == 4
        assert len({admitted["execution_id"] for admitted, _ in results}) == 1
        first, second = history(operator)
        assert (first["execution_id"], first["superseded"]) == (predecessor["execution_id"], True)
        assert (second["generation"], second["previous_execution_id"]) == (2, predecessor["execution_id"])
        assert second["execution_id"] == results[0][0]["execution_id"]


class TestStopping:
    def test_sigterm_drains_and_hands_back_the_running_task(self, live_server, workers, tmp_path):
        operator = Operator(live_server.client())
        pod = workers(live_server, POD, "--grace-period", "1",
                      extra_env=pod_env(operator.launcher_token(), str(uuid.uuid4())))
        operator.create_run(python_task("t", GATED, str(tmp_path / "never"), retries=0))
        ti = running(operator)
        assert pod.stop(timeout=60) == 0  # the manifest's terminationGracePeriodSeconds
        [attempt] = operator.attempts(ti["ti_id"])
        assert (attempt["outcome_kind"], attempt["reason"]) == ("infra", "worker_lost")
        assert operator.find_ti("t")["try_number"] == 1


def settings_of(env: dict[str, str], tmp_path: Path, *argv: str):
    """The worker settings `fenceline worker` would read in a Pod with this environment."""
    with pytest.MonkeyPatch.context() as patch:
        for name in POD_ENV.values():
            patch.delenv(name, raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.setenv("FENCELINE_LAUNCHER_TOKEN", "a-token")
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        return from_args(parser.parse_args(["--state-dir", str(tmp_path / "state"), *argv]))


class TestSettings:
    def test_the_seat_is_the_pods_name(self, tmp_path):
        settings = settings_of(pod_env("t", "u-1"), tmp_path)
        assert (settings.seat, settings.runtime) == (POD, "kubernetes")
        assert settings.pod == {"pod_namespace": NAMESPACE, "pod_name": POD, "pod_uid": "u-1"}

    def test_another_seat_is_refused(self, tmp_path):
        with pytest.raises(ValueError, match="the seat is the Pod's name"):
            settings_of(pod_env("t", "u-1"), tmp_path, "--seat", "other")

    def test_the_downward_api_fields_are_required(self, tmp_path):
        env = {**pod_env("t", "u-1"), "FENCELINE_POD_UID": ""}
        with pytest.raises(ValueError, match="needs FENCELINE_POD_UID from the downward API"):
            settings_of(env, tmp_path)
