"""What a Pod's status decides, on Pod objects shaped as the API server serves them (contract
9.1): the container's termination and the Pod's conditions, never its phase alone."""

import pytest

from app.launcher.outcome import never_started, outcome_of, started

STARTED, FINISHED = "2026-11-30T10:00:00Z", "2026-11-30T10:05:00Z"


def pod(phase: str, state: dict | None = None, **status) -> dict:
    statuses = [{"name": "task", "image": "registry.example/etl:1", "ready": False, "restartCount": 0,
                 "started": "running" in (state or {}), "state": state}] if state is not None else []
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fl-t-0123456789-t1-e1", "uid": "u-1"},
            "status": {"phase": phase, "qosClass": "Burstable", "containerStatuses": statuses, **status}}


def ended(code: int, reason: str, **extra) -> dict:
    return {"terminated": {"exitCode": code, "reason": reason, "startedAt": STARTED, "finishedAt": FINISHED,
                           "containerID": "containerd://0f1e", **extra}}


DISRUPTED = {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": FINISHED}


class TestTermination:
    @pytest.mark.parametrize(("the_pod", "expected"), [
        (pod("Succeeded", ended(0, "Completed")), ("success", None)),
        (pod("Failed", ended(1, "Error")), ("failed", None)),
        (pod("Failed", ended(137, "OOMKilled")), ("unexecutable", "oom_killed")),
        # The kubelet's eviction under node pressure.
        (pod("Failed", ended(137, "Error"), reason="Evicted", message="The node was low on resource: memory.",
             conditions=[{**DISRUPTED, "reason": "TerminationByKubelet"}]), ("unexecutable", "evicted")),
        # Preemption, and a drain through the Eviction API: SIGTERM, exit 143.
        (pod("Failed", ended(143, "Error"), conditions=[{**DISRUPTED, "reason": "PreemptionByScheduler"}]),
         ("unexecutable", "evicted")),
        (pod("Running", ended(143, "Error"), conditions=[{**DISRUPTED, "reason": "EvictionByEvictionAPI"}]),
         ("unexecutable", "evicted")),
        # The node is gone: the Pod garbage collector or the taint manager removes the Pod.
        (pod("Failed", ended(137, "ContainerStatusUnknown"), conditions=[{**DISRUPTED, "reason": "DeletionByPodGC"}]),
         ("unexecutable", "node_lost")),
        (pod("Failed", ended(137, "Error"), conditions=[{**DISRUPTED, "reason": "DeletionByTaintManager"}]),
         ("unexecutable", "node_lost")),
        (pod("Failed", ended(137, "ContainerStatusUnknown",
                             message="The container could not be located when the pod was terminated")),
         ("unexecutable", "node_lost")),
        # activeDeadlineSeconds (the payload's timeout_seconds).
        (pod("Failed", ended(137, "Error"), reason="DeadlineExceeded",
             message="Pod was active on the node longer than the specified deadline"),
         ("unexecutable", "deadline_exceeded")),
        # A container that finished before the eviction came: its own outcome stands.
        (pod("Succeeded", ended(0, "Completed"), reason="Evicted"), ("success", None)),
    ])
    def test_the_container_decides(self, the_pod, expected):
        found = outcome_of(the_pod)
        assert (found.state, found.reason) == expected, found.why

    def test_a_pod_deleted_by_someone_else_is_node_lost_not_a_failure(self):
        deleting = pod("Running", ended(143, "Error"))
        deleting["metadata"]["deletionTimestamp"] = FINISHED
        assert (outcome_of(deleting).state, outcome_of(deleting).reason) == ("unexecutable", "node_lost")

    @pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown"])
    def test_the_phase_alone_decides_nothing(self, phase):
        assert outcome_of(pod(phase)) is None
        assert outcome_of(pod(phase, {"running": {"startedAt": STARTED}})) is None

    def test_a_failed_pod_whose_container_never_ran_is_dispatch_failed(self):
        rejected = pod("Failed", reason="OutOfcpu", message="Pod Node didn't have enough resource: cpu")
        assert (outcome_of(rejected).state, outcome_of(rejected).reason) == ("unexecutable", "dispatch_failed")


class TestTerminationMessage:
    def test_it_may_reschedule(self):
        message = '{"state": "rescheduled", "reschedule_at": "2026-12-01T00:00:00+00:00"}'
        found = outcome_of(pod("Succeeded", ended(0, "Completed", message=message)))
        assert (found.state, found.reschedule_at) == ("rescheduled", "2026-12-01T00:00:00+00:00")

    def test_it_may_name_an_infrastructure_fault(self):
        message = '{"state": "unexecutable", "reason": "node_lost"}'
        found = outcome_of(pod("Failed", ended(1, "Error", message=message)))
        assert (found.state, found.reason) == ("unexecutable", "node_lost")

    @pytest.mark.parametrize(("code", "reason"), [(137, "Error"), (137, "OOMKilled"), (143, "Error"), (1, "Error")])
    def test_a_success_it_records_wins_over_the_exit_code(self, code, reason):
        """#543: the task wrote its success, then was killed (or failed) before it exited 0."""
        found = outcome_of(pod("Failed", ended(code, reason, message='{"state": "success"}')))
        assert (found.state, found.reason) == ("success", None), found.why

    def test_a_failure_it_records_wins_over_exit_0(self):
        found = outcome_of(pod("Succeeded", ended(0, "Completed", message='{"state": "failed", "rows": 3}')))
        assert found.state == "failed"

    @pytest.mark.parametrize("message", ["plain text", '{"state": "done"}', '{"state": "rescheduled"}',
                                         '{"state": "rescheduled", "reschedule_at": "2026-12-01T00:00:00"}',
                                         '{"state": "unexecutable", "reason": "tired"}', '{"state": "unexecutable"}',
                                         '"success"', '{"status": "success"}', "[1, 2]", '{"state": "succ'])
    def test_anything_else_is_ignored(self, message):
        assert outcome_of(pod("Failed", ended(2, "Error", message=message))).state == "failed"


class TestStarting:
    def test_started_means_user_code_ran(self):
        assert not started(pod("Pending", {"waiting": {"reason": "ContainerCreating"}}))
        assert started(pod("Running", {"running": {"startedAt": STARTED}}))
        assert started(pod("Failed", ended(1, "Error")))

    def test_an_image_that_cannot_be_named_never_starts(self):
        bad = pod("Pending", {"waiting": {"reason": "InvalidImageName", "message": 'invalid reference "x::y"'}})
        assert (outcome_of(bad).state, outcome_of(bad).reason) == ("unexecutable", "dispatch_failed")

    def test_a_pull_back_off_or_an_unschedulable_pod_waits_for_the_deadline(self):
        pulling = pod("Pending", {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}})
        unschedulable = pod("Pending", conditions=[{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu."}])
        for waiting in (pulling, unschedulable):
            assert outcome_of(waiting) is None
            verdict = never_started(waiting, 300)
            assert (verdict.state, verdict.reason) == ("unexecutable", "dispatch_failed")
        assert "ImagePullBackOff" in never_started(pulling, 300).why
        assert "Insufficient cpu" in never_started(unschedulable, 300).why
