"""The base of every request body."""

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


def _unstorable(value: Any, path: str) -> str | None:
    """Where `value` holds text that one of the two databases cannot store (a NUL character,
    or a lone surrogate, which is not Unicode), if anywhere."""
    if isinstance(value, str):
        if "\x00" in value:
            return f"{path or 'text'} contains a NUL character"
        try:
            value.encode()
        except UnicodeEncodeError:
            return f"{path or 'text'} is not valid Unicode"
    elif isinstance(value, dict):
        for key, item in value.items():
            if found := _unstorable(key, path) or _unstorable(item, f"{path}.{key}" if path else str(key)):
                return found
    elif isinstance(value, list):
        for n, item in enumerate(value):
            if found := _unstorable(item, f"{path}[{n}]"):
                return found
    return None


class Strict(BaseModel):
    """Unknown fields are refused, and so is text SQLite and PostgreSQL would not store alike,
    so that both databases answer the same 422."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        if found := _unstorable(data, ""):
            raise ValueError(found)
        return data
