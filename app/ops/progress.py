"""The progress bar of the long commands (`fenceline logs copy`, `fenceline db clean`) on a
terminal: one line, redrawn at most ten times a second, and at the end."""

import time
from typing import TextIO


class ProgressBar:
    WIDTH = 30

    def __init__(self, out: TextIO) -> None:
        self.out, self.drawn = out, 0.0

    def show(self, done: int, total: int, note: str) -> None:
        """`done` of `total` units, `note` naming them and what else is worth saying."""
        if time.monotonic() - self.drawn < 0.1 and done < total:
            return
        filled = self.WIDTH * min(done, total) // total if total else self.WIDTH
        self.out.write(f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} {note}")
        self.out.flush()
        self.drawn = time.monotonic()

    def done(self) -> None:
        if self.drawn:
            self.out.write("\n")
            self.out.flush()
