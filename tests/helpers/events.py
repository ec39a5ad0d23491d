"""An event that crosses processes (Spark's Python workers, a child process): set when its
file exists. Waits poll every 10 ms up to a deadline; picklable (it is only a path)."""

from __future__ import annotations

import os
import time
from pathlib import Path

_POLL_S = 0.01


class FileEvent:
    """:class:`threading.Event`'s ``set``/``is_set``/``wait`` on a file at ``path`` (in a
    directory of the test's own, such as ``tmp_path``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def set(self) -> None:
        Path(self.path).touch()

    def is_set(self) -> bool:
        return os.path.exists(self.path)

    def wait(self, timeout: float) -> bool:
        """Whether the event is set within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.is_set():
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return True
