"""Progress for long work: a log line per stage and a text progress bar on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts ``total`` steps; prints ``[####....] i/total label (elapsed)`` per step."""

    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 24) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        self.total = total
        self.done = 0
        self.width = width
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()

    def step(self, label: str) -> None:
        """Mark one step done and print its line."""
        self.update(self.done + 1, label)

    def update(self, done: int, label: str) -> None:
        """Mark ``done`` steps done (at most ``total``) and print its line."""
        self.done = max(0, min(self.total, done))
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        print(
            f"[{bar}] {self.done}/{self.total} {label} ({elapsed:.1f}s)",
            file=self.stream,
            flush=True,
        )
