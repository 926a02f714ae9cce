"""Reading /metrics as a Prometheus scraper would (operator token or HTTP Basic)."""

from prometheus_client.parser import text_string_to_metric_families

from tests.factories import Client


def sample(client: Client, headers: dict[str, str], name: str, **labels: str) -> float:
    """The value of the sample `name` with exactly `labels`; 0 when it was never recorded."""
    resp = client.get("/metrics", headers=headers)
    assert resp.status_code == 200, resp.text
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


def identity_conflicts(client: Client, headers: dict[str, str], swarm: str, reason: str) -> float:
    return sample(client, headers, "execution_identity_conflicts_total", swarm=swarm, reason=reason)
