"""Who may see the dashboard: the operator's JWT in an HttpOnly, SameSite=Strict cookie.

The cookie carries the same operator token that POST /auth/token mints, scoped to `/ui`; only
the /ui routes read it, so the JSON API never accepts a cookie and gains no CSRF surface.
Cross-site POSTs are refused twice over: a SameSite=Strict cookie is never sent on them, and
`same_origin` turns away any POST whose Origin or Sec-Fetch-Site names another site (which also
covers login CSRF, where no cookie is involved yet). The actions' forms (app/ui/actions.py) also
carry a per-session token (`checked_form`).
"""

import hashlib
import hmac
from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import Depends, Form, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse

from app.auth import tokens
from app.auth.deps import installation
from app.errors import AppError
from app.web.routes import Route

COOKIE = "fenceline_ui"
COOKIE_PATH = "/ui"
LOGIN_PATH = "/ui/login"
HOME_PATH = "/ui/runs"

# Pages render only escaped text, one same-origin stylesheet and, on a live log, one
# same-origin script that reads a same-origin /ui endpoint (docs/decisions/0004): no inline
# script or style runs, no other site may frame them, and nothing authenticated is cached.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
                               "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


class LoginRequired(Exception):
    """No valid operator cookie: the page answers with a redirect to the login form."""


class CrossSiteRequest(Exception):
    """A form POST that another site sent."""


def operator_from_cookie(request: Request) -> str | None:
    """The operator named by a valid cookie; None without one (expired, forged, wrong scope)."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    try:
        return tokens.decode(installation(request).keyring, token, scopes=("operator",))["sub"]
    except (tokens.InvalidToken, tokens.WrongScope):
        return None


def require_ui_operator(request: Request) -> str:
    if (operator := operator_from_cookie(request)) is None:
        raise LoginRequired
    return operator


UiOperatorDep = Annotated[str, Depends(require_ui_operator)]


def same_origin(request: Request) -> None:
    """Refuse a POST sent by another site (CSRF). Browsers send Origin on every POST and
    Sec-Fetch-Site on modern ones; a client sending neither is not a browser being tricked."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise CrossSiteRequest
    origin = request.headers.get("origin")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc != request.headers.get("host")):
        raise CrossSiteRequest


def csrf_token(request: Request) -> str:
    """The session's form token: derived from the session cookie, which another site can
    neither read nor send, so only this session's own pages can carry it."""
    return hashlib.sha256(b"fenceline-ui-form\0" + request.cookies.get(COOKIE, "").encode()).hexdigest()


def checked_form(request: Request, csrf: Annotated[str, Form()] = "") -> None:
    """Refuse an action's POST sent by another site: a foreign Origin or Sec-Fetch-Site, or a
    form without this session's token."""
    same_origin(request)
    if not request.cookies.get(COOKIE) or not hmac.compare_digest(csrf, csrf_token(request)):
        raise CrossSiteRequest


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a dashboard path only, never another site."""
    if target and target.startswith("/ui/") and "\\" not in target and not target.startswith(LOGIN_PATH):
        return target
    return HOME_PATH


def login_redirect(request: Request) -> RedirectResponse:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    response = RedirectResponse(f"{LOGIN_PATH}?next={quote(here, safe='')}", status_code=303)
    if COOKIE in request.cookies:  # expired or forged: drop it
        response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
    return response


def set_session_cookie(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        COOKIE, token, max_age=request.app.state.settings.operator_token_ttl_seconds, path=COOKIE_PATH,
        httponly=True, samesite="strict", secure=request.url.scheme == "https",
    )


def clear_session_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")


ErrorPage = Callable[[Request, int, str, str], Response]


def ui_route(error_page: ErrorPage) -> type[Route]:
    """A route class for HTML pages: a missing login becomes a redirect, a refusal an HTML
    error page (not problem+json), and every answer carries the security headers."""

    class UiRoute(Route):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def ui_handler(request: Request) -> Response:
                try:
                    response = await handler(request)
                except LoginRequired:
                    response = login_redirect(request)
                except CrossSiteRequest:
                    response = error_page(request, 403, "Cross-site request refused",
                                          "This form may only be sent from fenceline's own pages.")
                except RequestValidationError:
                    response = error_page(request, 404, "Not found", "No such page.")
                except AppError as exc:
                    if exc.status >= 500:
                        raise
                    response = error_page(request, exc.status, exc.title, exc.detail)
                response.headers.update(SECURITY_HEADERS)
                response.headers.setdefault("Cache-Control", "no-store")
                return response

            return ui_handler

    return UiRoute
