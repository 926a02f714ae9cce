"""Health, readiness, the version, the request id and the offline API docs (contract 8)."""

import re
import uuid

import pytest
from sqlalchemy import make_url, text

from app import __version__
from app.ops.migrate import head_revision
from tests.support.api import assert_problem
from tests.support.tcp_proxy import TcpProxy


class TestHealth:
    def test_live_answers_without_a_token(self, client):
        assert client.get("/health/live").json() == {"status": "ok"}

    def test_ready_when_database_schema_and_log_store_are(self, client):
        resp = client.get("/health/ready")
        assert resp.status_code == 200
        assert resp.json() == {"status": "ready", "checks": {"database": "ok", "schema": "ok", "log_store": "ok"}}

    def test_not_ready_while_the_schema_is_not_at_head(self, client, engine):
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0003_older'"))
        try:
            problem = assert_problem(client.get("/health/ready"), 503, "not-ready")
        finally:
            with engine.begin() as conn:
                conn.execute(text("UPDATE alembic_version SET version_num = :head"), {"head": head_revision()})
        assert "0003_older" in problem["checks"]["schema"] and head_revision() in problem["detail"]
        assert problem["checks"]["database"] == "ok"
        assert client.get("/health/ready").status_code == 200

    def test_not_ready_while_the_log_store_cannot_be_written(self, make_client, tmp_path):
        (tmp_path / "a-file").write_text("not a directory")
        client = make_client(log_store="file", log_dir=tmp_path / "a-file" / "logs")
        problem = assert_problem(client.get("/health/ready"), 503, "not-ready")
        assert problem["checks"]["log_store"].startswith("the file store cannot be written")
        assert problem["checks"]["schema"] == "ok"

    @pytest.mark.postgres_only("a SQLite file cannot become unreachable")
    def test_not_ready_but_live_while_the_database_does_not_answer(self, make_client, db_url):
        url = make_url(db_url)
        with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
            client = make_client(database_url=url.set(host="127.0.0.1", port=proxy.port).render_as_string(False))
            assert client.get("/health/ready").status_code == 200
            proxy.cut()
            problem = assert_problem(client.get("/health/ready"), 503, "not-ready")
            assert problem["checks"]["database"].startswith("does not answer")
            assert client.get("/health/live").status_code == 200
            proxy.restore()
            assert client.get("/health/ready").status_code == 200

    def test_health_stays_as_it_was(self, client, is_postgres):
        assert client.get("/health").json() == {"status": "ok", "database": "postgresql" if is_postgres else "sqlite"}


def test_the_version_is_in_the_openapi_document(client):
    assert client.get("/openapi.json").json()["info"]["version"] == __version__ != "0+unknown"


class TestRequestId:
    @pytest.mark.parametrize("rid", ["abc-123", "A.b_c-9", "x" * 128])
    def test_a_well_formed_one_is_taken_and_echoed(self, client, rid):
        assert client.get("/health/live", headers={"X-Request-ID": rid}).headers["x-request-id"] == rid

    @pytest.mark.parametrize("rid", ["", "has space", "x" * 129, "semi;colon", "ünï"])
    def test_any_other_is_replaced_by_a_fresh_one(self, client, rid):
        echoed = client.get("/health/live", headers={"X-Request-ID": rid.encode()}).headers["x-request-id"]
        assert echoed != rid and re.fullmatch(r"[0-9a-f]{32}", echoed)

    def test_one_is_made_when_none_is_sent_and_on_refusals_too(self, client):
        first, second = client.get("/v1/runs"), client.get("/v1/runs")
        assert first.status_code == 401
        assert first.headers["x-request-id"] != second.headers["x-request-id"]


class TestOfflineDocs:
    @pytest.mark.parametrize("page", ["/docs", "/redoc"])
    def test_the_pages_load_nothing_from_elsewhere(self, client, page):
        html = client.get(page).text
        assert "://" not in html
        referenced = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert referenced
        for url in referenced:
            assert url.startswith("/"), url
            assert client.get(url).status_code == 200, url

    def test_swagger_ui_and_redoc_bundles_are_served(self, client):
        for name, kind in [("swagger-ui-bundle.js", "javascript"), ("redoc.standalone.js", "javascript"),
                           ("swagger-ui.css", "css")]:
            resp = client.get(f"/docs/assets/{name}")
            assert resp.status_code == 200 and kind in resp.headers["content-type"]
            assert len(resp.content) > 10_000
        assert client.get(f"/docs/assets/{uuid.uuid4().hex}.js").status_code == 404


def test_operation_ids_stay_unique(client):
    """Generated clients name a method per operation id (two `live` routes once broke the SDK)."""
    ids = [op["operationId"] for ops in client.get("/openapi.json").json()["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
