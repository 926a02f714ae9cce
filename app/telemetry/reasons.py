"""The infrastructure reasons of contract 2.4: why an attempt may end unexecutable. The server
takes them and the agents name them (standard library only: the agents import nothing else of
the server)."""

INFRA_REASONS = ("evicted", "oom_killed", "node_lost", "deadline_exceeded", "agent_lost", "dispatch_lost",
                 "worker_lost", "dispatch_failed")
