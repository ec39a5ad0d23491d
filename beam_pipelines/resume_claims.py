"""Claims of restored states, so a splittable DoFn can tell a clean resume from a retry.

A runner resumes a splittable DoFn from the restriction and watermark-estimator state that
its last committed bundle left. When a bundle fails, the runner runs the same state again,
in any worker, and Beam's SDF API does not say which attempt this is (no attempt number,
no bundle id that survives a retry). Two attempts from one immutable state can only tell
each other apart through something they share. So an attempt claims the state's token
(:meth:`ResumeClaims.claim`): the first claimant is the only attempt to have started from
that state; a later one is a retry (or a speculative duplicate) and must assume that an
earlier attempt held resources, such as Pub/Sub leases.

:class:`ResumeClaims` keeps one empty file per claimed token in a directory, created with
``O_CREAT | O_EXCL``. That is atomic on a local and on a POSIX shared file system, so every
process that sees the directory agrees on who claimed first. The default directory is a
private directory of the user (mode 0700, owner checked, refused if others may write it)
under the system's temporary directory, which all workers of one host share (the
DirectRunner, Spark in local mode). A runner whose workers span hosts needs a directory
on a shared file system: with a host-local one, a retry on another host looks like a clean resume.

Claims older than ``max_age`` seconds are swept away now and then; ``max_age`` must
exceed the longest time between an attempt's start and its retry's.
"""

from __future__ import annotations

import os
import re
import time

from theory.data.private import private_dir

__all__ = ["DEFAULT_CLAIMS_NAME", "ResumeClaims"]

#: The default claims directory's name: ``<tmp>/<name>-<uid>``, one host's workers (of
#: one user) share it; private to the user (:func:`theory.data.private.private_dir`).
DEFAULT_CLAIMS_NAME = "dataflow-watermarks-resume-claims"
_TOKEN = re.compile(r"[0-9A-Za-z_-]{1,128}")
_SWEEP_EVERY = 512


class ResumeClaims:
    """First-claimant-wins claims of state tokens in ``directory`` (see the module)."""

    def __init__(self, directory: str | None = None, *, max_age: float = 3600.0) -> None:
        if not max_age > 0:
            raise ValueError(f"max_age must be > 0 s, got {max_age}")
        self.directory = os.fspath(directory) if directory is not None else None
        self.max_age = float(max_age)
        self._claims = 0

    def claim(self, token: str | None) -> bool:
        """True for the first claim of ``token`` by any process sharing the directory,
        False for every later one and for ``None`` (a first start, never clean)."""
        if token is None:
            return False
        if not _TOKEN.fullmatch(token):
            raise ValueError(f"claim token must match {_TOKEN.pattern}, got {token!r}")
        if self.directory is None:
            self.directory = os.fspath(private_dir(DEFAULT_CLAIMS_NAME))
        else:
            os.makedirs(self.directory, exist_ok=True)
        self._claims += 1
        if self._claims % _SWEEP_EVERY == 0:
            self.sweep()
        try:
            fd = os.open(os.path.join(self.directory, token), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def sweep(self) -> int:
        """Remove claims older than ``max_age``; returns how many."""
        if self.directory is None:
            return 0
        cutoff = time.time() - self.max_age
        removed = 0
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return 0
        for entry in entries:
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:  # swept by another process
                continue
        return removed
