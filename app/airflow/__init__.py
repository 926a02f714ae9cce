"""The Airflow-compatible read API: /api/v2 (Airflow 3) and /api/v1 (Airflow 2.10).

Wire shapes follow docs/airflow-compat.md, checked against the official clients. A try is one
entry however many epochs it had; native states outside Airflow's enum are mapped onto it.
Every query parameter Airflow defines is honoured or refused (list_params.py says which, filters.py
and listing.py how); routes Airflow has and fenceline does not answer 404 saying so (absent_resources.py).
"""
