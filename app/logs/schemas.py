"""The wire shapes of a log append (POST /v1/attempts/logs, and a batch's `log` entry)."""

from typing import Annotated

from pydantic import BaseModel, Field

from app.web.schemas import Strict


class LogAppend(Strict):
    allow_nul = True  # task output may hold NUL bytes; the log store keeps them
    offset: Annotated[int, Field(ge=0, description="The byte length the agent believes is already stored.")]
    content: str = Field(description="Text lines; a line may be a JSON object with timestamp, level and event.")


class LogAppended(BaseModel):
    size: int
