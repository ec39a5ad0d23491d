"""Per-user private directories for what a run keeps on disk.

:func:`private_dir` is the one place that makes a directory under a shared parent (the
temporary directory by default): ``<parent>/<name>-<uid>``, created with ``mkdir`` mode
0700 (atomic: it exists or it does not). One that already exists is opened with
``O_NOFOLLOW | O_DIRECTORY`` and checked on the opened descriptor, as ssh checks its keys:
it must be owned by this user and not writable by group or others, or it is refused
with :class:`UnsafeDirectoryError` (one line naming the path, the owner and the mode).
A directory of our own that others may only read is narrowed to 0700.

:func:`run_dir` is a fresh directory inside it for one process (``run-<pid>-XXXXXXXX``),
removed at the process's exit (those of processes killed before they could are removed
by the next): Spark's ``spark.local.dir`` and the JVM's ``java.io.tmpdir`` go there.
:func:`check_private_file` checks a file before it is loaded as code or configuration
(the JVM's class-data archive).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = [
    "UnsafeDirectoryError",
    "check_private_file",
    "pid_alive",
    "private_dir",
    "remove_run_dir",
    "remove_stale_runs",
    "run_dir",
]


class UnsafeDirectoryError(PermissionError):
    """A directory or file another user could have planted or could change."""


def _uid() -> int:
    return os.geteuid()


def _refusal(path: Path, st: os.stat_result, what: str) -> str | None:
    """Why ``st`` (of ``path``) is not private to this user, or None."""
    if st.st_uid != _uid():
        return (
            f"refusing {what} {path}: owned by uid {st.st_uid}, not by this user "
            f"(uid {_uid()}); remove it or set TMPDIR to a directory of your own"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"refusing {what} {path}: mode {stat.S_IMODE(st.st_mode):04o} lets others write "
            f"in it; chmod 700 it or remove it"
        )
    return None


def private_dir(name: str, parent: str | os.PathLike[str] | None = None) -> Path:
    """The directory ``<parent>/<name>-<uid>`` (``parent``: the temporary directory),
    mode 0700 and owned by this user; created if missing. UnsafeDirectoryError if it
    exists as a symlink, a non-directory, another user's or one writable by others."""
    if not name or os.sep in name or name.startswith("."):
        raise ValueError(f"private directory name must be a plain name, got {name!r}")
    base = Path(parent if parent is not None else tempfile.gettempdir())
    path = base / f"{name}-{_uid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        raise UnsafeDirectoryError(
            f"refusing private directory {path}: not a directory of this user's "
            f"({err.strerror}); remove it or set TMPDIR to a directory of your own"
        ) from None
    try:
        st = os.fstat(fd)
        why = _refusal(path, st, "private directory")
        if why is not None:
            raise UnsafeDirectoryError(why)
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def check_private_file(path: str | os.PathLike[str]) -> Path:
    """``path`` if it is a regular file (not a symlink) owned by this user and not
    writable by group or others; UnsafeDirectoryError otherwise (FileNotFoundError if
    it is missing)."""
    p = Path(path)
    st = os.lstat(p)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeDirectoryError(f"refusing {p}: not a regular file")
    why = _refusal(p, st, "file")
    if why is not None:
        raise UnsafeDirectoryError(why)
    return p


_RUN_DIRS: dict[str, Path] = {}


def run_dir(
    name: str = "dataflow-watermarks", parent: str | os.PathLike[str] | None = None
) -> Path:
    """This process's own directory inside :func:`private_dir` ``(name, parent)``, made
    once and removed with its contents at the process's exit (then the private directory
    too, if nothing else is left in it)."""
    key = f"{name}\0{parent}"
    found = _RUN_DIRS.get(key)
    if found is not None and found.is_dir():
        return found
    for _ in range(3):  # another process may remove the empty private directory meanwhile
        home = private_dir(name, parent)
        remove_stale_runs(home)
        try:
            made = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=home))
            break
        except FileNotFoundError:
            continue
    else:
        raise UnsafeDirectoryError(f"cannot make a run directory in {home}")
    _RUN_DIRS[key] = made
    atexit.register(remove_run_dir, made, os.getpid())
    return made


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_runs(home: Path) -> list[Path]:
    """Remove the run directories in ``home`` whose process is gone (killed before its
    exit could remove them); returns them."""
    gone = []
    for entry in home.iterdir():
        pid = entry.name.split("-")[1] if entry.name.startswith("run-") else ""
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            gone.append(entry)
    return gone


def remove_run_dir(path: Path, owner: int) -> None:
    """Remove the run directory ``path`` made by process ``owner`` (not by a forked
    child), and its private directory if that is then empty."""
    if os.getpid() != owner:
        return
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(path.parent)
