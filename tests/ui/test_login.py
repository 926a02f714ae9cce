"""Operator login to the dashboard: the form, the cookie, the redirects, logout and CSRF."""

from app.ui.access import COOKIE
from tests.support.api import ADMIN_PASSWORD
from tests.support.pages import texts, ui_login

PAGES = ["/ui/runs", "/ui/runs/dag/run", "/ui/runs/dag/run?view=graph", "/ui/runs/dag/run?view=timeline",
         "/ui/seats", "/ui/seats/etl-worker-1", "/ui/pools",
         "/ui/task-instances/00000000-0000-0000-0000-000000000000",
         "/ui/task-instances/00000000-0000-0000-0000-000000000000/tries/1/log",
         "/ui/task-instances/00000000-0000-0000-0000-000000000000/tries/1/log.txt",
         "/ui/task-instances/00000000-0000-0000-0000-000000000000/tries/1/log/tail?offset=0"]


class TestLoginForm:
    def test_the_form_is_served_without_a_login(self, client):
        resp = client.get("/ui/login")
        assert resp.status_code == 200
        assert 'name="username"' in resp.text and 'type="password"' in resp.text

    def test_a_bad_password_shows_the_form_with_an_error_and_sets_no_cookie(self, client):
        resp = ui_login(client, password="wrong")
        assert resp.status_code == 400
        assert texts(resp.text, "error") == ["Invalid username or password."]
        assert 'name="password"' in resp.text
        assert "set-cookie" not in resp.headers and COOKIE not in client.cookies

    def test_an_unknown_user_is_refused_alike(self, client):
        resp = client.post("/ui/login", data={"username": "root", "password": "x"}, follow_redirects=False)
        assert resp.status_code == 400 and "set-cookie" not in resp.headers

    def test_a_missing_field_is_a_failed_login_not_an_error_page(self, client):
        resp = client.post("/ui/login", data={"username": "admin"}, follow_redirects=False)
        assert resp.status_code == 400 and texts(resp.text, "error") == ["Invalid username or password."]

    def test_good_credentials_set_an_httponly_strict_cookie_and_redirect(self, client):
        resp = ui_login(client)
        assert resp.status_code == 303 and resp.headers["location"] == "/ui/runs"
        cookie = resp.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=")
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/ui"} <= attributes
        assert client.get("/ui/runs").status_code == 200


class TestRedirects:
    def test_every_page_redirects_to_the_login_without_a_cookie(self, client):
        for path in PAGES:
            resp = client.get(path, follow_redirects=False)
            assert resp.status_code == 303, path
            assert resp.headers["location"].startswith("/ui/login?next="), path

    def test_login_returns_to_the_page_asked_for(self, client):
        resp = client.get("/ui/seats?x=1", follow_redirects=False)
        assert resp.headers["location"] == "/ui/login?next=%2Fui%2Fseats%3Fx%3D1"
        login_page = client.get(resp.headers["location"])
        assert 'value="/ui/seats?x=1"' in login_page.text
        assert ui_login(client, next="/ui/seats?x=1").headers["location"] == "/ui/seats?x=1"

    def test_next_never_leaves_the_dashboard(self, client):
        for target in ("https://evil.example/", "//evil.example/ui/", "/v1/runs", "/ui/\\evil"):
            client.cookies.clear()
            assert ui_login(client, next=target).headers["location"] == "/ui/runs", target

    def test_a_forged_or_wrong_scope_cookie_is_no_login(self, client, operator):
        import jwt
        forged = jwt.encode({"sub": "admin", "scope": "operator", "iat": 0, "exp": 2**31, "jti": "x"},
                            "another-secret-another-secret-another", algorithm="HS256", headers={"kid": "k1"})
        worker_token = operator.admit("etl-worker-1")["worker_token"]
        for token in (forged, worker_token, "garbage"):
            client.cookies.set(COOKIE, token, path="/ui")
            resp = client.get("/ui/runs", follow_redirects=False)
            assert resp.status_code == 303, token

    def test_the_json_api_does_not_accept_the_cookie(self, client):
        ui_login(client)
        token = client.cookies.get(COOKIE)
        resp = client.get("/v1/runs", cookies={COOKIE: token})
        assert resp.status_code == 401


class TestLogout:
    def test_logout_drops_the_cookie_and_pages_redirect_again(self, client):
        ui_login(client)
        resp = client.post("/ui/logout", follow_redirects=False)
        assert resp.status_code == 303 and resp.headers["location"] == "/ui/login"
        assert f'{COOKIE}=""' in resp.headers["set-cookie"] and "max-age=0" in resp.headers["set-cookie"].lower()
        assert COOKIE not in client.cookies
        assert client.get("/ui/runs", follow_redirects=False).status_code == 303

    def test_every_page_offers_logout(self, client):
        ui_login(client)
        assert 'action="/ui/logout"' in client.get("/ui/runs").text


class TestCrossSite:
    def test_a_login_posted_from_another_site_is_refused(self, client):
        resp = client.post("/ui/login", data={"username": "admin", "password": ADMIN_PASSWORD},
                           headers={"Origin": "https://evil.example"}, follow_redirects=False)
        assert resp.status_code == 403 and "set-cookie" not in resp.headers

    def test_sec_fetch_site_cross_site_is_refused(self, client):
        ui_login(client)
        resp = client.post("/ui/logout", headers={"Sec-Fetch-Site": "cross-site"}, follow_redirects=False)
        assert resp.status_code == 403 and "set-cookie" not in resp.headers

    def test_a_same_origin_post_is_accepted(self, client):
        resp = client.post("/ui/login", data={"username": "admin", "password": ADMIN_PASSWORD},
                           headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
                           follow_redirects=False)
        assert resp.status_code == 303

    def test_pages_carry_a_policy_that_allows_only_same_origin_scripts_and_no_inline_code(self, client):
        ui_login(client)
        resp = client.get("/ui/runs")
        policy = dict(d.strip().split(" ", 1) for d in resp.headers["content-security-policy"].split(";"))
        assert policy == {"default-src": "'none'", "script-src": "'self'", "connect-src": "'self'",
                          "style-src": "'self'", "img-src": "'self'", "form-action": "'self'",
                          "frame-ancestors": "'none'", "base-uri": "'none'"}
        assert resp.headers["x-frame-options"] == "DENY" and resp.headers["cache-control"] == "no-store"

    def test_the_stylesheet_and_the_tail_script_are_served_without_a_login_and_nothing_else_is(self, client):
        css, script = client.get("/ui/static/ui.css"), client.get("/ui/static/tail.js")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        assert "textContent" in script.text and "innerHTML" not in script.text  # appends text, never markup
        for name in ("../views.py", "..%2Frouter.py", "nope.js"):
            assert client.get(f"/ui/static/{name}").status_code == 404
