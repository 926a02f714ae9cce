"""Reads fenceline with the official Airflow 2.10 client; run by the second virtual environment.

Usage: python v1_client.py HOST USERNAME PASSWORD DAG RUN. Prints one JSON document of what
the client deserialised; any deserialisation error fails the process.
"""

import json
import sys

import airflow_client.client as af
from airflow_client.client.api.dag_api import DAGApi
from airflow_client.client.api.dag_run_api import DAGRunApi
from airflow_client.client.api.task_instance_api import TaskInstanceApi


def main(host: str, username: str, password: str, dag: str, run: str) -> dict:
    config = af.Configuration(host=f"{host}/api/v1", username=username, password=password)
    with af.ApiClient(config) as api:
        tis = TaskInstanceApi(api)
        out = {
            "dags": [d.dag_id for d in DAGApi(api).get_dags().dags],
            "runs": [r.dag_run_id for r in DAGRunApi(api).get_dag_runs(dag).dag_runs],
            "run_state": str(DAGRunApi(api).get_dag_run(dag, run).state),
            "task_instances": sorted([t.task_id, t.map_index] for t in tis.get_task_instances(dag, run).task_instances),
            "extract": [tis.get_task_instance(dag, run, "extract").try_number,
                        str(tis.get_task_instance(dag, run, "extract").state)],
            "mapped": tis.get_mapped_task_instance(dag, run, "fan", 1).map_index,
            "tries": [[t.try_number, str(t.state)]
                      for t in tis.get_task_instance_tries(dag, run, "extract").task_instances],
            "try_1": str(tis.get_task_instance_try_details(dag, run, "extract", 1).state),
            "mapped_tries": [[t.map_index, str(t.state)]
                             for t in tis.get_mapped_task_instance_tries(dag, run, "fan", 0).task_instances],
            "mapped_try": str(tis.get_mapped_task_instance_try_details(dag, run, "fan", 0, 1).state),
        }
        log = tis.get_log(dag, run, "extract", 1, full_content=True)
        out["log_1"] = log.content
        out["log_token_is_string"] = isinstance(log.continuation_token, str)
        again = tis.get_log(dag, run, "extract", 1, token=log.continuation_token)
        out["log_after_end"] = again.content
        try:
            tis.get_task_instance(dag, run, "missing")
        except af.ApiException as exc:
            out["missing_status"] = exc.status
    return out


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:6])))
