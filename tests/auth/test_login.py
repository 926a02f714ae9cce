"""Operator login (POST /auth/token) and the password a fresh install generates."""

import threading

from sqlalchemy import select

from app.auth.models import InstallationSecret
from tests.support.api import ADMIN_PASSWORD


def login(client, password, username="admin"):
    return client.post("/auth/token", json={"username": username, "password": password})


class TestLogin:
    def test_the_configured_password_gets_a_bearer_token(self, client):
        resp = login(client, ADMIN_PASSWORD)
        assert resp.status_code == 201
        assert resp.json()["token_type"] == "bearer"
        headers = {"Authorization": f"Bearer {resp.json()['access_token']}"}
        assert client.get("/v1/occupants", headers=headers).status_code == 200

    def test_a_wrong_password_is_401(self, client):
        resp = login(client, "wrong")
        assert resp.status_code == 401
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["type"] == "unauthorized"
        assert "access_token" not in resp.text

    def test_a_wrong_username_is_401(self, client):
        assert login(client, ADMIN_PASSWORD, username="root").status_code == 401

    def test_a_missing_field_is_422_naming_it(self, client):
        resp = client.post("/auth/token", json={"username": "admin"})
        assert resp.status_code == 422
        assert "body.password" in resp.json()["detail"]

    def test_the_oauth2_form_airflow_3_accepts_logs_in_too(self, client):
        resp = client.post("/auth/token", data={"username": "admin", "password": ADMIN_PASSWORD})
        assert resp.status_code == 201 and resp.json()["access_token"]
        wrong = client.post("/auth/token", data={"username": "admin", "password": "nope"})
        assert wrong.status_code == 401


class TestGeneratedPassword:
    def test_generated_once_handed_over_in_a_private_file_and_stored_only_as_a_hash(self, make_client, engine,
                                                                                     capsys):
        client = make_client(admin_password=None)
        password = client.app.state.installation.generated_password
        handed = client.app.state.settings.data_dir / "operator-password"
        out = capsys.readouterr().out
        assert password and password not in out and str(handed) in out  # a log stream is told the path only
        assert handed.read_text().strip() == password and handed.stat().st_mode & 0o777 == 0o600
        with engine.connect() as conn:
            secrets = dict(conn.execute(select(InstallationSecret.name, InstallationSecret.value)).all())
        assert secrets["admin_password_hash"].startswith("$argon2")
        assert all(password not in value for value in secrets.values())
        assert login(client, password).status_code == 201
        assert login(client, ADMIN_PASSWORD).status_code == 401

    def test_a_remembered_verification_never_admits_another_password(self, make_client):
        client = make_client(admin_password=None)
        password = client.app.state.installation.generated_password
        assert login(client, password).status_code == 201
        assert login(client, password + "x").status_code == 401
        assert login(client, password).status_code == 201

    def test_a_second_start_does_not_generate_again(self, make_client, capsys):
        password = make_client(admin_password=None).app.state.installation.generated_password
        capsys.readouterr()
        again = make_client(admin_password=None)
        assert again.app.state.installation.generated_password is None
        assert "password" not in capsys.readouterr().out
        assert login(again, password).status_code == 201

    def test_replicas_starting_together_generate_one_password(self, make_client):
        barrier, clients, lock = threading.Barrier(4, timeout=30), [], threading.Lock()

        def start():
            barrier.wait()
            client = make_client(admin_password=None)
            with lock:
                clients.append(client)

        threads = [threading.Thread(target=start) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        generated = [c.app.state.installation.generated_password for c in clients]
        [password] = [p for p in generated if p is not None]
        assert all(login(c, password).status_code == 201 for c in clients)

    def test_a_configured_password_generates_nothing(self, client, engine):
        assert client.app.state.installation.generated_password is None
        with engine.connect() as conn:
            names = conn.execute(select(InstallationSecret.name)).scalars().all()
        assert "admin_password_hash" not in names
