"""The one test harness, which bench/ uses too (no pytest fixture lives here: the conftests
build their fixtures from these pieces, and no test module imports another's code).

- api: the operator client, the worker and attempt helpers, the strict problem+json checks
- claims: waiting claims on a live server and its hub of waiters
- databases: throw-away databases (never the developer's data); clusters: a PostgreSQL of a
  test's own, to stop, fill or cut off
- ports: free loopback ports
- servers: the live server in a thread (and a starter of several), and `fenceline serve` as a
  child process; startup: `fenceline serve`'s refusals
- settings: the test settings of an app
- waiting: wait_until, polling a condition with a deadline
- agents: `fenceline worker` and `fenceline launcher` as child processes, and the tasks they run;
  kubernetes: the emulated Kubernetes API and the test kubelet the launcher drives
- airflow: the Airflow 2.10 client's virtual environment and scripts, and the runs the
  compatibility tests read
- identity, pages, tokens, logs, tracing, deploy, conformance: the identity refusal check, the
  dashboard's pages and browser, attempt tokens as the server mints them, the log stores, the
  in-memory span exporter, what reads deploy/, the OpenAPI conformance check
- screenshots: `python -m tests.support.screenshots` retakes the dashboard's screenshots
- concurrency, tcp_proxy, filesystems, scrape, mix, releases, s3, otlp: races, a cuttable TCP
  proxy, small file systems, reading /metrics, the mixed load, releases of the schema, moto's
  S3, an OTLP receiver
"""
