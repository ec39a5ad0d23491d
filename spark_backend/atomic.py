"""Atomic outputs: a directory is written in full under a temporary name, then renamed.

A failed run leaves no half-written output: the temporary directory is removed and any
previous output at the destination is kept.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh temp directory beside ``dest``; on success it replaces ``dest``."""
    target = Path(dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
