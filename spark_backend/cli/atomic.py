"""Atomic outputs: a directory is written in full under a temporary name beside its
destination, then swapped in.

- The temporary directory ``.NAME.tmp-PID-XXXX`` sits beside the destination and is
  removed on any failure (an exception, KeyboardInterrupt, or SIGTERM turned into
  :class:`Terminated` by the CLI). It holds :data:`MARKER`, which marks it as an output.
- The swap is ``renameat2(RENAME_EXCHANGE)`` (Linux, through ctypes), so the destination
  is never missing; the old output, now under the temporary name, is then removed. Where
  the exchange is unavailable, the old output is renamed aside and restored if the second
  rename fails. SIGINT and SIGTERM are held back during the swap.
- While a run writes, it holds an exclusive ``flock`` on its temporary directory. The next
  run removes the ``.NAME.tmp-*`` / ``.NAME.old-*`` siblings nobody holds whose pid is gone
  (left by a killed run), never those of a live run.
- Directories honour the umask (``mkdtemp`` makes 0700; it is widened to ``0777 & ~umask``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spark_backend.cli.interrupts import Terminated
from theory.data.io import write_file_atomically
from theory.data.private import pid_alive

#: The file every output directory holds, so a later run knows it may replace it.
MARKER = ".watermarks-output"

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def umask() -> int:
    """The process's umask (read without changing it for more than an instant)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _renameat2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_EXCHANGE = _renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically; False where the kernel or libc cannot (then
    nothing changed), OSError for any other failure."""
    if _EXCHANGE is None:
        return False
    rc = _EXCHANGE(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, f"cannot swap {b} into place: {os.strerror(err)}", str(b))


def _replace(tmp: Path, target: Path) -> None:
    """Put ``tmp`` at ``target``; the old ``target`` (if any) ends up at ``tmp`` or is
    restored if the fallback's second rename fails."""
    if not target.exists():
        os.rename(tmp, target)
        return
    if exchange(tmp, target):
        return
    old = target.parent / f".{target.name}.old-{os.getpid()}-{tmp.name[-8:]}"
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    os.rename(old, tmp)


def _owner_pid(name: str) -> int | None:
    """The pid in ``.NAME.tmp-PID-XXXX`` or ``.NAME.old-PID...``, None if there is none."""
    for tag in (".tmp-", ".old-"):
        _, sep, rest = name.rpartition(tag)
        if sep:
            digits = rest.split("-", 1)[0]
            return int(digits) if digits.isdigit() else None
    return None


def _locked(path: Path) -> bool:
    """True if a live process holds the flock on ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing releases the lock we may have taken
    return False


def stale_siblings(target: Path) -> list[Path]:
    """The temporary and old directories beside ``target`` whose run is gone: no live
    lock, and the pid in the name (if any) is not a live process."""
    if not target.parent.is_dir():
        return []
    found = []
    for p in target.parent.iterdir():
        if not p.name.startswith((f".{target.name}.tmp-", f".{target.name}.old-")):
            continue
        pid = _owner_pid(p.name)
        if pid is not None and pid != os.getpid() and pid_alive(pid):
            continue
        if pid == os.getpid() or _locked(p):
            continue
        found.append(p)
    return found


def remove_stale(target: Path) -> list[Path]:
    """Remove what :func:`stale_siblings` finds; returns what was removed."""
    gone = stale_siblings(target)
    for p in gone:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return gone


@contextmanager
def _signals_held() -> Iterator[None]:
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def atomic_directory(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh temp directory beside ``dest``; on success it replaces ``dest``.

    ``dest`` is resolved first (so ``.`` names the directory itself, and a symlink is
    followed: the directory it names is replaced and the link kept). Stale temporary
    directories of dead runs beside it are removed. On any failure the temporary
    directory is removed and a previous output stays as it was.
    """
    target = Path(os.path.realpath(dest))  # through a symlink: its target is replaced
    if target.parent == target:
        raise ValueError(f"cannot write an output at the root directory {target}")
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o777)
    remove_stale(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    lock = os.open(tmp, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.chmod(tmp, 0o777 & ~umask())
        (tmp / MARKER).write_text("written by the watermarks command line\n", encoding="utf-8")
        yield tmp
        with _signals_held():
            _replace(tmp, target)
            shutil.rmtree(tmp, ignore_errors=True)  # the old output, if there was one
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(lock)


__all__ = [
    "MARKER",
    "Terminated",
    "atomic_directory",
    "exchange",
    "pid_alive",
    "remove_stale",
    "umask",
    "write_file_atomically",  # one home: theory.data.io (beam_pipelines' sinks use it too)
]
