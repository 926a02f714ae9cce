"""`fenceline serve` refusing to start (contract 8): one clear line naming the setting, its own
exit status, no traceback (unless --log-level debug), and no banner before the port is bound.
The real command, as a child process."""

import json
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url

from app import __version__
from app.config import Settings
from tests.support.servers import FENCELINE, START_TIMEOUT, Served, clean_env
from tests.support.startup import refused, serve
from tests.support.tcp_proxy import TcpProxy


def test_version():
    done = subprocess.run([*FENCELINE, "--version"], capture_output=True, text=True, timeout=START_TIMEOUT)
    assert done.returncode == 0 and done.stdout.strip() == f"fenceline {__version__}"


class TestBadSetting:
    def test_a_bad_value_is_status_2_naming_the_setting(self, tmp_path):
        refused(serve(tmp_path, FENCELINE_DATABASE_POOL_SIZE="zero"), 2, "FENCELINE_DATABASE_POOL_SIZE", "'zero'")

    def test_a_young_gc_threshold_below_pythons_own_is_status_2(self, tmp_path):
        refused(serve(tmp_path, FENCELINE_GC_YOUNG_THRESHOLD="10"), 2, "FENCELINE_GC_YOUNG_THRESHOLD", "'10'")

    @pytest.mark.parametrize(("name", "value", "said"), [
        ("FENCELINE_JWT_ACCEPTED_KEYS", "{nope", "not JSON"),
        ("FENCELINE_TRUSTED_PROXIES", "nope", "not JSON"),
        ("FENCELINE_TRUSTED_PROXIES", '["999.0.0.0/8"]', "'999.0.0.0/8' is not an IP address or network"),
        ("FENCELINE_TRUSTED_PROXIES", '["proxy.example.com"]', "is not an IP address or network"),
        ("FENCELINE_PUBLIC_URL", "notaurl", "'notaurl' is not an http:// or https:// URL with a host"),
        ("FENCELINE_PUBLIC_URL", "http://fenceline:99999", "has no valid port"),
    ])
    def test_json_addresses_and_urls_that_do_not_parse_are_status_2(self, tmp_path, name, value, said):
        """Issue 41, item 5: a traceback (exit 1), or accepted silently, on 15e7989."""
        refused(serve(tmp_path, **{name: value}), 2, name, said)

    def test_addresses_networks_and_peer_names_are_trusted_proxies(self):
        entries = ["10.0.0.1", "10.0.0.0/8", "::1", "2001:db8::/32", "*", "testclient"]
        assert Settings(trusted_proxies=entries, public_url="https://fenceline.example:8443/x").trusted_proxies \
            == entries

    def test_an_unknown_log_format_is_status_2(self, tmp_path):
        refused(serve(tmp_path, FENCELINE_LOG_FORMAT="xml"), 2, "FENCELINE_LOG_FORMAT")

    @pytest.mark.parametrize("url", ["not a url", "postgresql://user@host:port/db", "nosuchdriver://x/y"])
    def test_a_malformed_database_url_is_status_2(self, tmp_path, url):
        refused(serve(tmp_path, FENCELINE_DATABASE_URL=url), 2, "FENCELINE_DATABASE_URL")

    @pytest.mark.parametrize("port", ["99999", "0", "http"])
    def test_a_port_out_of_range_is_status_2(self, tmp_path, port):
        done = subprocess.run([*FENCELINE, "serve", "--port", port], cwd=tmp_path, env=clean_env(tmp_path / "data"),
                              capture_output=True, text=True, timeout=START_TIMEOUT)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines() == [
            f"fenceline serve: argument --port: a port is a whole number from 1 to 65535, not {port!r} "
            "(see fenceline serve --help)"]

    def test_a_database_other_than_sqlite_or_postgresql_is_status_2(self, tmp_path):
        line = refused(serve(tmp_path, DATABASE_URL="mysql://fenceline@db/fenceline"), 2, "SQLite or PostgreSQL")
        assert line.startswith("fenceline: DATABASE_URL ") and "MySQLdb" not in line

    def test_a_bad_url_is_named_by_the_variable_it_came_from(self, tmp_path):
        assert refused(serve(tmp_path, DATABASE_URL="not a url"), 2).startswith("fenceline: DATABASE_URL ")
        both = serve(tmp_path, DATABASE_URL="sqlite:///elsewhere.db", FENCELINE_DATABASE_URL="not a url")
        assert refused(both, 2).startswith("fenceline: FENCELINE_DATABASE_URL ")

    def test_debug_shows_the_traceback_too(self, tmp_path):
        done = serve(tmp_path, "--log-level", "debug", FENCELINE_DATABASE_URL="not a url")
        assert done.returncode == 2 and "Traceback" in done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("fenceline: FENCELINE_DATABASE_URL")


def test_a_port_in_use_is_status_3_and_no_banner(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run([*FENCELINE, "serve", "--port", str(port)], cwd=tmp_path,
                              env=clean_env(tmp_path / "data"), capture_output=True, text=True,
                              timeout=START_TIMEOUT)
    refused(done, 3, f"127.0.0.1:{port}", "in use")


class TestDatabaseUnreachable:
    def test_status_4_after_retrying_until_the_timeout(self, tmp_path):
        with socket.create_server(("127.0.0.1", 0)) as closed:
            port = closed.getsockname()[1]
        done = serve(tmp_path, FENCELINE_DATABASE_URL=f"postgresql://fenceline:secret@127.0.0.1:{port}/fenceline",
                     FENCELINE_DB_CONNECT_TIMEOUT_SECONDS="1.5")
        line = refused(done, 4, "FENCELINE_DATABASE_URL", "FENCELINE_DB_CONNECT_TIMEOUT_SECONDS", "1.5s")
        assert "secret" not in done.stdout + done.stderr and "***" in line
        assert "retrying" in done.stdout  # it did wait for it

    def test_a_database_that_does_not_exist_is_status_4_at_once(self, tmp_path, pg_database):
        """The server answered, and no retry makes the database exist: refused without waiting
        out the (here long) connect timeout."""
        missing = make_url(pg_database).set(database="fenceline_no_such_database").render_as_string(False)
        done = serve(tmp_path, FENCELINE_DATABASE_URL=missing, FENCELINE_DB_CONNECT_TIMEOUT_SECONDS="600")
        refused(done, 4, "FENCELINE_DATABASE_URL", "refused the connection", "does not exist")
        assert "retrying" not in done.stdout

    def test_a_database_that_comes_up_during_the_back_off_is_served(self, tmp_path, pg_database):
        url = make_url(pg_database)
        with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
            proxy.cut()
            env = {**clean_env(tmp_path / "data"), "FENCELINE_DB_CONNECT_TIMEOUT_SECONDS": "120",
                   "FENCELINE_DATABASE_URL": url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)}
            server = Served(tmp_path, env)
            try:
                deadline = time.monotonic() + START_TIMEOUT
                while "retrying" not in server.output:
                    assert server.process.poll() is None and time.monotonic() < deadline, server.output
                    time.sleep(0.05)
                assert "listening on" not in server.output
                proxy.restore()
                assert server.wait_healthy().status_code == 200
            finally:
                server.stop()


def test_a_schema_not_at_head_under_no_migrate_is_status_5(tmp_path):
    refused(serve(tmp_path, "--no-migrate"), 5, "fenceline migrate")


class TestUnwritableDirectory:
    def test_the_data_directory_is_status_6(self, tmp_path):
        (tmp_path / "a-file").write_text("")
        refused(serve(tmp_path, FENCELINE_DATA_DIR=str(tmp_path / "a-file" / "data")), 6, "FENCELINE_DATA_DIR")

    def test_the_log_directory_is_status_6(self, tmp_path):
        (tmp_path / "a-file").write_text("")
        refused(serve(tmp_path, FENCELINE_LOG_DIR=str(tmp_path / "a-file" / "logs")), 6, "FENCELINE_LOG_DIR")


TRACE = "0af7651916cd43dd8448eb211c80319c"


class TestJsonLogs:
    def test_every_line_is_a_json_object_and_each_request_has_its_line(self, tmp_path):
        env = {**clean_env(tmp_path / "data"), "FENCELINE_LOG_FORMAT": "json", "FENCELINE_ADMIN_PASSWORD": "pw"}
        server = Served(tmp_path, env)
        try:
            server.wait_healthy()
            headers = {"X-Request-ID": "req-42", "traceparent": f"00-{TRACE}-b7ad6b7169203331-01"}
            resp = httpx.get(f"{server.url}/v1/runs/d/r", headers=headers)
            assert resp.status_code == 401 and resp.headers["x-request-id"] == "req-42"
            deadline = time.monotonic() + START_TIMEOUT
            while "req-42" not in server.output and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            server.stop()
        lines = [json.loads(line) for line in server.output.splitlines() if line.strip()]
        assert all({"timestamp", "level", "logger", "message"} <= line.keys() for line in lines)
        assert any("listening on" in line["message"] for line in lines)
        # Exactly one access line; another line logged in the request's context may carry its id too.
        (request,) = [line for line in lines
                      if line.get("request_id") == "req-42" and line["logger"] == "fenceline.access"]
        assert request["route"] == "/v1/runs/{dag_id}/{run_id}" and request["path"] == "/v1/runs/d/r"
        assert request["status"] == 401 and request["method"] == "GET" and request["duration_ms"] > 0
        assert request["trace_id"] == TRACE


def migrate(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FENCELINE, "migrate", *args], cwd=tmp_path, env={**clean_env(tmp_path / "data"), **env},
                          capture_output=True, text=True, timeout=START_TIMEOUT)


class TestMigrate:
    """`migrate` and `migrate --check` (the Kubernetes init container's command) refuse as
    `serve` does: one line, the same statuses."""

    @pytest.mark.parametrize("args", [(), ("--check",)])
    def test_an_unreachable_database_is_status_4(self, tmp_path, args):
        with socket.create_server(("127.0.0.1", 0)) as closed:
            port = closed.getsockname()[1]
        done = migrate(tmp_path, *args, FENCELINE_DATABASE_URL=f"postgresql://fenceline:secret@127.0.0.1:{port}/x",
                       FENCELINE_DB_CONNECT_TIMEOUT_SECONDS="0.5")
        refused(done, 4, "FENCELINE_DATABASE_URL", "did not answer within 0.5s")
        assert "secret" not in done.stdout + done.stderr

    @pytest.mark.parametrize("args", [(), ("--check",)])
    def test_a_bad_url_is_status_2(self, tmp_path, args):
        refused(migrate(tmp_path, *args, DATABASE_URL="postgresql://user@host:port/db"), 2, "DATABASE_URL")

    def test_check_writes_nothing(self, tmp_path):
        """It only reads: a data directory it could not write is no reason to refuse."""
        (tmp_path / "a-file").write_text("")
        done = migrate(tmp_path, "--check", FENCELINE_DATA_DIR=str(tmp_path / "a-file" / "data"))
        refused(done, 5, "fenceline migrate")

    def test_logs_copy_refuses_a_bad_url_too(self, tmp_path):
        done = subprocess.run([*FENCELINE, "logs", "copy", "--to", "database"], cwd=tmp_path,
                              env={**clean_env(tmp_path / "data"), "DATABASE_URL": "not a url"},
                              capture_output=True, text=True, timeout=START_TIMEOUT)
        refused(done, 2, "DATABASE_URL")
