"""The fencing token in the task's environment (contract 11.1): it strictly increases across
the attempts of one task instance, whichever rail started them, and names that task instance."""

from tests.support.agents import python_task
from tests.support.api import Operator, json_of
from tests.support.waiting import wait_until

# Records its fence, then ends as its attempt number says: evicted (an infra re-place on the
# same try), failed (a retry, a new try), then success.
RECORDS_ITS_FENCE = """
import os, pathlib, signal, sys
marks = pathlib.Path(sys.argv[1])
with marks.open("a") as out:
    out.write(f"{os.environ['FENCELINE_FENCE_KEY']} {os.environ['FENCELINE_FENCING_TOKEN']}\\n")
n = len(marks.read_text().splitlines())
if n == 1:
    os.kill(os.getpid(), signal.SIGTERM)
if n == 2:
    sys.exit(1)
"""


class TestFencingToken:
    def test_every_attempt_holds_a_larger_token_for_the_same_key(self, server, workers, tmp_path):
        operator = Operator(server.client())
        marks = tmp_path / "marks"
        operator.create_run(python_task("fenced", RECORDS_ITS_FENCE, str(marks), retries=1, max_infra_attempts=1))
        workers(server, "etl-a")
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed on its third attempt")
        ti = operator.find_ti("fenced")
        json_of(operator.post(f"/v1/task-instances/{ti['ti_id']}/clear"))  # an operator's rail: a fourth
        wait_until(lambda: len(marks.read_text().splitlines()) == 4 and operator.run()["state"] == "success",
                   "the cleared task to run again")

        seen = [line.split() for line in marks.read_text().splitlines()]
        assert {key for key, _ in seen} == {ti["ti_id"]}
        tokens = [int(token) for _, token in seen]
        assert tokens == sorted(set(tokens)) and tokens[0] >= 1, tokens
        epochs = [a["attempt_epoch"] for a in operator.attempts(ti["ti_id"])]
        assert tokens == epochs, "the token is the attempt's epoch"
