"""The base of every request body, and the bound on free-form (schemaless) fields."""

from contextvars import ContextVar
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator

# How deep a free-form field (a run's conf, ...) may nest, counted from the field itself: the
# request's setting (FENCELINE_MAX_FREE_FORM_DEPTH), set per request by app/web/ingress.py.
free_form_depth: ContextVar[int] = ContextVar("free_form_depth", default=32)


def json_depth(value: Any, stop: int) -> int:
    """How many levels of objects and arrays `value` nests (a scalar 0, `{}` 1), counted
    without recursion and only up to `stop + 1`: past `stop` the exact figure does not matter."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > stop:
            return deepest
        todo.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _bounded(value: Any) -> Any:
    limit = free_form_depth.get()
    if json_depth(value, limit) > limit:
        raise ValueError(f"nests deeper than {limit} levels")
    return value


# A schemaless object a client may send, nested at most free_form_depth levels.
FreeForm = Annotated[dict[str, Any], AfterValidator(_bounded)]


def unstorable(value: Any, path: str, allow_nul: bool = False) -> str | None:
    """Where `value` holds text that one of the two databases cannot store (a NUL character,
    or a lone surrogate, which is not Unicode), if anywhere."""
    if isinstance(value, str):
        if "\x00" in value and not allow_nul:
            return f"{path or 'text'} contains a NUL character"
        try:
            value.encode()
        except UnicodeEncodeError:
            return f"{path or 'text'} is not valid Unicode"
    elif isinstance(value, dict):
        for key, item in value.items():
            if found := (unstorable(key, path, allow_nul)
                         or unstorable(item, f"{path}.{key}" if path else str(key), allow_nul)):
                return found
    elif isinstance(value, list):
        for n, item in enumerate(value):
            if found := unstorable(item, f"{path}[{n}]", allow_nul):
                return found
    return None


class Strict(BaseModel):
    """Unknown fields are refused, and so is text SQLite and PostgreSQL would not store alike,
    so that both databases answer the same 422."""

    model_config = ConfigDict(extra="forbid")
    # A body stored outside the database (log content, in files) may carry NUL characters.
    allow_nul: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        if found := unstorable(data, "", cls.allow_nul):
            raise ValueError(found)
        return data


# --- refusals: the problem documents (RFC 9457) the API answers with --------------------------

class Problem(BaseModel):
    """A problem document: a stable `type`, a title, the status and a detail; a family of
    refusals (the subclasses, each under the statuses it is sent with) adds typed members."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str


class ValidationItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class InvalidRequest(Problem):
    """422: the request breaks a rule. `errors` says where validation failed; `rows`, which
    rows of a snapshot break the API's rules."""

    errors: list[ValidationItem] | None = None
    rows: list[str] | None = None
