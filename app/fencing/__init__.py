"""Fencing for the stores a task writes to (contract 11, docs/fencing.md): a task's attempt
finds its fencing token and fence key in its environment, and these guards refuse a write that
carries a token smaller than one the store has already seen for that key, so a superseded
attempt that still runs cannot write after its replacement.

Import it from task code: it imports nothing of the server. `app.fencing.guard` holds the fence
and the SQL guard (PostgreSQL, SQLite), `app.fencing.s3` the object guard (the `s3` extra).
"""

from app.fencing.guard import Fence, FenceError, NoFence, StaleToken, create_fence_table, guarded_write

__all__ = ["Fence", "FenceError", "NoFence", "StaleToken", "create_fence_table", "guarded_write"]
