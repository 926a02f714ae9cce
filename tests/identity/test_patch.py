"""PATCH /v1/executions/{id}: bind pod_uid once, record observations, refuse everything else."""

from datetime import UTC, datetime, timedelta

import pytest

from tests.support.api import kube_target
from tests.support.identity import refused

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pod(operator, seat="etl-worker-1", previous=None, pod_uid=None):
    """A kubernetes execution admitted before its Pod exists (no pod_uid yet)."""
    return operator.admit(seat, previous, backend="kubernetes", target=kube_target(pod_uid))


def patch(operator, execution, **body):
    return operator.patch(f"/v1/executions/{execution['execution_id']}", json=body)


def observation(phase, minutes=0, terminal=False, **extra):
    return {"phase": phase, "observed_at": (T0 + timedelta(minutes=minutes)).isoformat(), "terminal": terminal, **extra}


class TestBindPodUid:
    def test_binds_once_and_shows_in_the_target(self, operator):
        execution = pod(operator)
        resp = patch(operator, execution, pod_uid="uid-1")
        assert resp.status_code == 200
        assert resp.json()["runtime_target"]["pod_uid"] == "uid-1"
        read = operator.get(f"/v1/executions/{execution['execution_id']}").json()
        assert read["runtime_target"] == {**execution["runtime_target"], "pod_uid": "uid-1"}

    def test_the_same_uid_again_is_idempotent(self, operator):
        execution = pod(operator)
        first = patch(operator, execution, pod_uid="uid-1")
        again = patch(operator, execution, pod_uid="uid-1")
        assert again.status_code == 200
        assert again.json() == first.json()

    def test_a_uid_admitted_with_the_execution_counts_as_bound(self, operator):
        execution = pod(operator, pod_uid="uid-1")
        assert patch(operator, execution, pod_uid="uid-1").status_code == 200
        refused(operator, lambda: patch(operator, execution, pod_uid="uid-2"), "identity-conflict")

    def test_a_second_different_uid_is_an_identity_conflict(self, operator):
        execution = pod(operator)
        patch(operator, execution, pod_uid="uid-1")
        refused(operator, lambda: patch(operator, execution, pod_uid="uid-2"), "identity-conflict")

    def test_a_uid_another_execution_recorded_is_reused(self, operator):
        pod(operator, "other-seat", pod_uid="uid-1")
        execution = pod(operator)
        refused(operator, lambda: patch(operator, execution, pod_uid="uid-1"), "pod-uid-reused")

    def test_a_uid_of_a_superseded_execution_is_still_reused(self, operator):
        first = pod(operator, pod_uid="uid-1")
        second = pod(operator, previous=first["execution_id"])
        refused(operator, lambda: patch(operator, second, pod_uid="uid-1"), "pod-uid-reused")

    def test_a_local_execution_binds_no_pod(self, operator):
        execution = operator.admit()
        refused(operator, lambda: patch(operator, execution, pod_uid="uid-1"), "identity-conflict")

    def test_contradicting_uids_in_one_request_bind_nothing(self, operator):
        execution = pod(operator)
        target = {**execution["runtime_target"], "pod_uid": "uid-2"}
        refused(operator, lambda: patch(operator, execution, pod_uid="uid-1", runtime_target=target),
                "identity-conflict")

    def test_unknown_execution_is_404(self, operator):
        resp = operator.patch("/v1/executions/00000000-0000-0000-0000-000000000000", json={"pod_uid": "u"})
        assert resp.status_code == 404
        assert resp.json()["type"] == "execution-not-found"


class TestImmutableFields:
    @pytest.mark.parametrize("field, value", [
        ("swarm", "other"), ("seat", "etl-worker-2"), ("generation", 7), ("role", "changed"),
        ("labels", {"team": "b"}), ("runtime_backend", "local"),
        ("previous_execution_id", "00000000-0000-0000-0000-000000000001"),
    ])
    def test_a_changed_field_is_an_identity_conflict(self, operator, field, value):
        execution = pod(operator)
        refused(operator, lambda: patch(operator, execution, **{field: value}), "identity-conflict")

    def test_a_changed_target_member_is_an_identity_conflict(self, operator):
        execution = pod(operator)
        target = {**execution["runtime_target"], "pod_name": "another-pod"}
        refused(operator, lambda: patch(operator, execution, runtime_target=target), "identity-conflict")

    def test_repeating_the_admitted_values_is_accepted(self, operator):
        execution = pod(operator)
        same = {k: execution[k] for k in ("seat", "swarm", "generation", "runtime_backend", "runtime_target")}
        resp = patch(operator, execution, **same, pod_uid="uid-1")
        assert resp.status_code == 200
        assert resp.json()["runtime_target"]["pod_uid"] == "uid-1"

    def test_unknown_fields_are_422_naming_them(self, operator):
        resp = patch(operator, pod(operator), superseded_by="x")
        assert resp.status_code == 422
        assert "superseded_by" in resp.json()["detail"]


class TestStaleUpdate:
    def test_binding_a_superseded_execution_is_stale(self, operator):
        first = pod(operator)
        pod(operator, previous=first["execution_id"])
        problem = refused(operator, lambda: patch(operator, first, pod_uid="uid-1"), "stale-update")
        assert problem["current_execution_id"] is not None

    def test_observing_a_superseded_execution_is_stale(self, operator):
        first = pod(operator)
        pod(operator, previous=first["execution_id"])
        refused(operator, lambda: patch(operator, first, observation=observation("Running")), "stale-update")

    def test_a_refused_uid_stays_free(self, operator):
        first = pod(operator)
        second = pod(operator, previous=first["execution_id"])
        patch(operator, first, pod_uid="uid-1")
        assert patch(operator, second, pod_uid="uid-1").status_code == 200


class TestObservations:
    def test_the_latest_observation_is_recorded(self, operator):
        execution = pod(operator)
        patch(operator, execution, observation=observation("Pending", 0))
        resp = patch(operator, execution, observation=observation("Running", 1))
        assert resp.status_code == 200
        assert resp.json()["observation"] == {
            "phase": "Running", "reason": None, "exit_code": None, "terminal": False,
            "observed_at": (T0 + timedelta(minutes=1)).isoformat().replace("+00:00", "Z"),
        }

    def test_an_older_observation_arriving_late_is_ignored(self, operator):
        execution = pod(operator)
        patch(operator, execution, observation=observation("Running", 5))
        resp = patch(operator, execution, observation=observation("Pending", 1))
        assert resp.status_code == 200
        assert resp.json()["observation"]["phase"] == "Running"

    def test_a_terminal_observation_is_recorded_with_its_exit(self, operator):
        execution = pod(operator)
        patch(operator, execution, observation=observation("Running", 1))
        terminal = observation("Failed", 2, terminal=True, reason="OOMKilled", exit_code=137)
        patch(operator, execution, observation=terminal)
        read = operator.get(f"/v1/executions/{execution['execution_id']}").json()
        assert read["observation"]["terminal"] is True
        assert (read["observation"]["phase"], read["observation"]["reason"], read["observation"]["exit_code"]) == (
            "Failed", "OOMKilled", 137)

    def test_binding_and_observing_in_one_request(self, operator):
        execution = pod(operator)
        body = patch(operator, execution, pod_uid="uid-1", observation=observation("Running")).json()
        assert body["runtime_target"]["pod_uid"] == "uid-1"
        assert body["observation"]["phase"] == "Running"

    def test_a_refused_binding_records_no_observation(self, operator):
        execution = pod(operator)
        patch(operator, execution, pod_uid="uid-1")
        refused(operator, lambda: patch(operator, execution, pod_uid="uid-2", observation=observation("Running")),
                "identity-conflict")

    def test_an_observation_without_timezone_is_422(self, operator):
        resp = patch(operator, pod(operator),
                     observation={"phase": "Running", "observed_at": "2026-01-01T00:00:00"})
        assert resp.status_code == 422
        assert "observation.observed_at" in resp.json()["detail"]
