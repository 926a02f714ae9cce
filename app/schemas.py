"""The base of every request body."""

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator


def _unstorable(value: Any, path: str, allow_nul: bool) -> str | None:
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
            if found := (_unstorable(key, path, allow_nul)
                         or _unstorable(item, f"{path}.{key}" if path else str(key), allow_nul)):
                return found
    elif isinstance(value, list):
        for n, item in enumerate(value):
            if found := _unstorable(item, f"{path}[{n}]", allow_nul):
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
        if found := _unstorable(data, "", cls.allow_nul):
            raise ValueError(found)
        return data
