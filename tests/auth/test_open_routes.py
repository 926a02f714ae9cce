"""Contract 6: only the health routes (/health, /health/live, /health/ready, Airflow's /api/v2/monitor/health),
/api/v2/version (open in Airflow 3 too), /openapi.json, the docs pages and the public keys at
/.well-known/jwks.json (contract 11.3) answer without a token, and the login routes, without
which nobody could get one. (The dashboard's pages, which
redirect to its login form instead, are covered in tests/ui.)"""

import re

OPEN = {"/health", "/health/live", "/health/ready", "/api/v2/monitor/health", "/api/v2/version", "/auth/token",
        "/auth/token/cli", "/.well-known/jwks.json"}


def concrete(path: str) -> str:
    """A route path with every parameter filled in (authentication is checked before them)."""
    return re.sub(r"\{[^}]+\}", "1", path)


def test_every_other_route_refuses_an_anonymous_caller(client):
    checked = 0
    for path, operations in client.app.openapi()["paths"].items():
        if path in OPEN:
            continue
        for method in operations:
            resp = client.request(method.upper(), concrete(path), json={}, follow_redirects=False)
            assert resp.status_code == 401, (method, path, resp.status_code)
            checked += 1
    assert checked > 40


def test_the_documentation_is_open(client):
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert client.get(path).status_code == 200
