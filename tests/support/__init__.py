"""The one test harness, which bench/ uses too (no pytest fixture lives here: tests/conftest.py
builds its fixtures from these pieces).

- api: the operator client, the worker and attempt helpers, the strict problem+json checks
- claims: waiting claims on a live server and its hub of waiters
- databases: throw-away databases (never the developer's data)
- ports: free loopback ports
- servers: the live server in a thread, and `fenceline serve` as a child process
- settings: the test settings of an app
- waiting: wait_until, polling a condition with a deadline
- agents: `fenceline worker` as a child process, and the tasks it runs
- concurrency, tcp_proxy, filesystems, scrape: races, a cuttable TCP proxy, small file
  systems, reading /metrics
"""
