"""What an attempt token says, read without verifying it: only the server verifies. The worker
reads a token's execution (which batch may carry its writes) and its lifetime (when to renew)."""

import base64
import functools
import json
from typing import Any


@functools.lru_cache(maxsize=1024)  # read on each of a task's writes: its token, a few times
def unverified_claims(token: str) -> dict[str, Any]:
    """The token's claims; empty for a token that is no JWT."""
    try:
        body = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (IndexError, ValueError, AttributeError):
        return {}
    return claims if isinstance(claims, dict) else {}
