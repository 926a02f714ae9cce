from tests.support.api import Worker, task


def test_claim_run_succeed(operator):
    worker = Worker(operator, "w1")
    operator.create_run(task("a"), task("b", "a"))
    (a,) = worker.claim(5)
    assert a.task_id == "a"
    assert a.send("running").status_code == 200
    assert a.heartbeat().status_code == 200
    a.report("success")
    (b,) = worker.claim(5)
    assert b.task_id == "b"
    assert b.send("success").status_code == 200
    assert operator.run()["state"] == "success"
