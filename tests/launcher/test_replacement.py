"""At most one live attempt (contract 9.3, 9.5): a dead launcher's Pods are deleted by the
launcher that takes their replacements, and a replacement Pod is created only once its
predecessor is gone or terminal, within --replacement-wait; the overlap that remains is
fenceline_attempt_overlap_seconds on the launcher's /metrics."""

import shutil
import signal
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.agents import settled
from tests.support.api import Operator
from tests.support.kubernetes import image_task
from tests.support.ports import free_port
from tests.support.waiting import wait_until


def overlap(port: int) -> dict[str, float]:
    """The launcher's fenceline_attempt_overlap_seconds: its count, sum, and Pods at 0 s."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "fenceline_attempt_overlap_seconds"]
    values = {s.name.rsplit("_", 1)[1]: s.value for s in family.samples if "le" not in s.labels}
    values["zero"] = next(s.value for s in family.samples if s.labels.get("le") == "0.0")
    return values


def pods_of(cluster, seat: str) -> dict[str, str]:
    """The seat's Pods, by task id: their names."""
    return {p["metadata"]["labels"]["fenceline.io/task-id"]: p["metadata"]["name"]
            for p in cluster.pods(f"fenceline.io/launcher={seat}")}


def running_everywhere(operator, cluster, seat: str, tasks: str) -> dict[str, str]:
    names = wait_until(lambda: len(p := pods_of(cluster, seat)) == len(tasks) and p, f"{seat}'s Pods", 60)
    for task_id in tasks:
        wait_until(lambda: operator.find_ti(task_id)["state"] == "running", f"{task_id} running", 60)  # noqa: B023
    return names


class TestADeadLaunchersPods:
    @pytest.mark.parametrize("dies", ["killed", "stopped"])
    def test_are_deleted_and_gone_before_their_replacements_are_created(self, serve, cluster, kubelet, launchers,
                                                                        dies):
        server = serve(agent_lost_after_seconds=1.0)
        operator = Operator(server.client())
        la = launchers(server, seat="la")
        operator.create_run(*(image_task(t, "epoch:1:wait:never", "echo:done") for t in "abc"))
        old = running_everywhere(operator, cluster, "la", "abc")
        la.kill() if dies == "killed" else la.proc.send_signal(signal.SIGSTOP)
        port = free_port()
        lb = launchers(server, "--metrics-port", str(port), seat="lb")
        wait_until(lambda: (operator.reap(), all(operator.find_ti(t)["attempt_epoch"] > 1 for t in "abc"))[1],
                   "the reaper to re-place la's three attempts", timeout=60)
        for task_id in "abc":
            done = settled(operator, task_id, timeout=60)
            assert (done["state"], done["try_number"], done["infra_attempts"]) == ("success", 1, 1), task_id
        history = [(what, name) for _, what, name in cluster.history()]
        new = {t: next(p for what, p in history if what == "created" and p.startswith(f"fl-{t}-") and p != old[t])
               for t in "abc"}
        for task_id in "abc":
            assert history.index(("deleted", old[task_id])) < history.index(("created", new[task_id])), task_id
            # Its container stopped (the Pod terminal, soon gone) before the replacement's started.
            stopped, started = kubelet.ran[old[task_id]][1], kubelet.ran[new[task_id]][0]
            assert stopped is not None and stopped <= started, f"{task_id}: both ran at once"
            assert ("gone", old[task_id]) in history
            assert f"deleted Pod {old[task_id]} of a superseded attempt (launcher la)" in lb.output
        assert set(old.values()) <= set(cluster.deletes())
        assert overlap(port) == {"count": 3.0, "sum": 0.0, "zero": 3.0}
        if shutil.which("promtool"):  # Debian's prometheus
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            linted = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                                    timeout=60)
            assert linted.returncode == 0 and not (linted.stdout + linted.stderr).strip(), linted.stdout
        if dies == "stopped":  # la wakes up to its attempts superseded and their Pods gone
            la.proc.send_signal(signal.SIGCONT)
            # Each of its three attempts ends (refused as stale, or should_terminate) with a
            # teardown that finds its Pod gone: lb had deleted them.
            wait_until(lambda: la.output.count("deleted Pod (already gone)") == 3, "la to let its attempts go",
                       timeout=60)
        assert lb.stop() == 0

    def test_past_the_replacement_wait_the_replacement_runs_and_the_overlap_is_measured(
            self, serve, cluster, kubelet, launchers):
        """A node cut off from the API server: its Pod's deletion is never confirmed."""
        server = serve(agent_lost_after_seconds=1.0)
        operator = Operator(server.client())
        la = launchers(server, seat="la")
        operator.create_run(image_task("t", "epoch:1:wait:never", "wait:go"))
        old = running_everywhere(operator, cluster, "la", "t")["t"]
        kubelet.partition(old)
        la.kill()
        port = free_port()
        lb = launchers(server, "--metrics-port", str(port), "--replacement-wait", "1", seat="lb")
        wait_until(lambda: operator.reap().get("agent_lost"), "the reaper to re-place la's attempt")
        new = wait_until(lambda: pods_of(cluster, "lb").get("t"), "the replacement, past the wait", timeout=60)
        assert "still not stopped after 1s (--replacement-wait): creating the replacement beside it" in lb.output
        wait_until(lambda: kubelet.ran.get(new), "the replacement running beside it")
        assert cluster.pod(old)["metadata"]["deletionTimestamp"], "deleted, its stop not confirmed"
        kubelet.heal()
        wait_until(lambda: overlap(port)["count"] == 1, "the overlap measured once the old Pod stopped", timeout=60)
        measured = overlap(port)
        assert measured["zero"] == 0 and 0 < measured["sum"] < 30, measured
        kubelet.open("go")
        assert settled(operator, timeout=60)["state"] == "success"
        assert lb.stop() == 0
