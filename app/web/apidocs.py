"""/docs (Swagger UI) and /redoc (ReDoc) from packaged assets: they work on a network that
reaches nothing but this server. The assets are those the `fastapi-offline` package ships
(swagger-ui-dist and ReDoc's standalone bundle, both MIT-licensed); only its files are used."""

from pathlib import Path

import fastapi_offline
from fastapi import HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

from app.web.routes import Router

ASSETS = Path(fastapi_offline.__file__).parent / "static"
SERVED = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "redoc.standalone.js": "text/javascript", "favicon.png": "image/png"}
PREFIX = "/docs/assets"

router = Router(include_in_schema=False)


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    app = request.app
    return get_swagger_ui_html(
        openapi_url=app.openapi_url, title=f"{app.title} API", oauth2_redirect_url="/docs/oauth2-redirect",
        swagger_js_url=f"{PREFIX}/swagger-ui-bundle.js", swagger_css_url=f"{PREFIX}/swagger-ui.css",
        swagger_favicon_url=f"{PREFIX}/favicon.png",
        swagger_ui_parameters={"validatorUrl": None})  # the default validator is a remote service


@router.get("/docs/oauth2-redirect")
def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    app = request.app
    return get_redoc_html(openapi_url=app.openapi_url, title=f"{app.title} API",
                          redoc_js_url=f"{PREFIX}/redoc.standalone.js", redoc_favicon_url=f"{PREFIX}/favicon.png",
                          with_google_fonts=False)


@router.get(PREFIX + "/{name}")
def asset(name: str) -> FileResponse:
    if name not in SERVED:
        raise HTTPException(404)
    return FileResponse(ASSETS / name, media_type=SERVED[name], headers={"Cache-Control": "max-age=86400"})
