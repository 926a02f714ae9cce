"""Domain refusals: one AppError family, raised by services and rendered by app/web/problems.py.

Every refusal has a stable `type` slug (the contract names them), a human title and detail,
and the status. Extra members (say `current_execution_id` or `should_terminate`) ride along.
This module knows nothing of HTTP frameworks, so services can raise without importing one.
"""

from typing import Any


class AppError(Exception):
    """A refusal with a stable problem type."""

    def __init__(
        self, status: int, type: str, title: str, detail: str | None = None, **extra: Any
    ) -> None:
        super().__init__(detail or title)
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail or title
        self.extra = extra
        self.headers: dict[str, str] = {}


def not_found(what: str, detail: str) -> AppError:
    return AppError(404, f"{what}-not-found", f"{what.replace('-', ' ').capitalize()} not found", detail)


def conflict(type: str, title: str, detail: str, **extra: Any) -> AppError:
    return AppError(409, type, title, detail, **extra)


def unauthorized(detail: str, scheme: str = "Bearer") -> AppError:
    err = AppError(401, "unauthorized", "Unauthorized", detail)
    err.headers = {"WWW-Authenticate": scheme}
    return err


def forbidden(detail: str) -> AppError:
    return AppError(403, "forbidden", "Forbidden", detail)


def invalid_input(errors: list[dict[str, Any]], detail: str | None = None) -> AppError:
    """422 validation-error listing `errors` ({loc, msg, type} each); the detail names where."""
    fields = ", ".join(".".join(str(p) for p in e["loc"]) for e in errors)
    return AppError(422, "validation-error", "Invalid request", detail or f"Invalid input at: {fields}", errors=errors)


def unstorable_value() -> AppError:
    """422 invalid-value: a value no column can hold (a NUL character or a lone surrogate in
    text, an integer beyond 64 bits), on both databases alike."""
    return AppError(422, "invalid-value", "Invalid value", "A value cannot be stored: text must be valid Unicode "
                    "without NUL characters, and integers must fit in 64 bits.")
