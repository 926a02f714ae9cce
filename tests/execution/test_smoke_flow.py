from tests.factories import admit


def test_claim_run_succeed(client, operator):
    worker = admit(client, operator, "w1")
    wh = {"Authorization": f"Bearer {worker['worker_token']}"}
    run = client.post("/v1/runs", json={"dag_id": "d", "run_id": "r", "tasks": [
        {"task_id": "a", "payload": {"command": ["true"]}, "retry_delay": 0},
        {"task_id": "b", "payload": {"command": ["true"]}, "upstream": ["a"], "retry_delay": 0}]}, headers=operator)
    assert run.status_code == 201, run.text
    items = client.post("/v1/dispatch/claim", json={"limit": 5}, headers=wh).json()["items"]
    assert [i["correlation"]["task_id"] for i in items] == ["a"]
    th = {"Authorization": f"Bearer {items[0]['attempt_token']}"}
    assert client.post("/v1/attempts/report", json={"state": "running"}, headers=th).status_code == 200
    assert client.post("/v1/attempts/heartbeat", headers=th).status_code == 200
    r = client.post("/v1/attempts/report", json={"state": "success"}, headers=th)
    assert r.status_code == 200, r.text
    items = client.post("/v1/dispatch/claim", json={"limit": 5}, headers=wh).json()["items"]
    assert [i["correlation"]["task_id"] for i in items] == ["b"]
    th = {"Authorization": f"Bearer {items[0]['attempt_token']}"}
    assert client.post("/v1/attempts/report", json={"state": "success"}, headers=th).status_code == 200
    assert client.get("/v1/runs/d/r", headers=operator).json()["state"] == "success"
