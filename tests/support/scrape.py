"""Reading /metrics as a Prometheus scraper would (here with the operator's token)."""

from prometheus_client.parser import text_string_to_metric_families

from tests.support.api import Operator


def sample(operator: Operator, name: str, **labels: str) -> float:
    """The value of the sample `name` with exactly `labels`; 0 when it was never recorded."""
    resp = operator.get("/metrics")
    assert resp.status_code == 200, resp.text
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


def identity_conflicts(operator: Operator, swarm: str, reason: str) -> float:
    return sample(operator, "execution_identity_conflicts_total", swarm=swarm, reason=reason)
