"""A faster start for the local driver JVM: the Java options :mod:`spark_backend.session.session`
gives it by default, and the class-data archive they use.

Most of a SparkSession's start is the JVM's own CPU: loading, verifying and linking the
classes of Spark's ~280 jars. ``-XX:SharedArchiveFile``, Java's application class-data
sharing (AppCDS), cuts it: the classes a session loads, already parsed and verified, are
mapped from an archive file instead of read from the jars, which takes seconds off the
session's start (``bench/runner.py --cold``). ``-XX:+UseSerialGC`` added nothing, and
``-XX:TieredStopAtLevel=1`` (C1 only) shortened the start but slowed Spark's own work
once warm (in local mode the driver JVM is also the executor), so neither is used:
:data:`FAST_START_OPTIONS` only states CDS's default mode.

The archive is built by the first session that finds none (one process at a time: it
holds a ``.building`` marker naming its pid; the others start without an archive): its
JVM is started with ``-XX:ArchiveClassesAtExit`` pointing at a pending file of its own,
and writes it when it exits: a one-time wait at that process's exit (the archive is
about a hundred megabytes). ``python -m spark_backend.session`` builds
it on purpose. :func:`publish_archive`, run at the Python process's exit, closes the
gateway's input, waits for the JVM to exit cleanly and only then renames the file into
place, so a session never maps a half-written archive. The archive's name carries a digest of
what it depends on (the Java runtime, Spark's jars, these options), so an upgrade of
either builds a new one. It lives in ``$XDG_CACHE_HOME/dataflow-watermarks`` (default
``~/.cache/dataflow-watermarks``; ``WATERMARKS_CACHE_DIR`` overrides), made 0700; the
archive is published 0600, and before a JVM maps it (as code) it and its folder are
checked to be this user's and writable by no one else (:func:`check_archive`).

A ``spark.driver.extraJavaOptions`` given by the caller replaces these options whole
(no archive either), as any ``--conf`` replaces a default.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any, Final

from spark_backend.cli.atomic import pid_alive
from theory.data.private import UnsafeDirectoryError, check_private_file

__all__ = [
    "FAST_START_OPTIONS",
    "archive_path",
    "cache_dir",
    "check_archive",
    "current_archive",
    "driver_java_options",
    "java_executable",
    "publish_archive",
    "spark_home",
]

#: The options given beside the archive (see the module docstring: C1 only and the serial
#: GC were measured and left out; ``-Xshare:auto`` is the JVM's default, stated).
FAST_START_OPTIONS: Final[str] = "-Xshare:auto"

# Java's unified logging prints CDS notes (classes it cannot archive, an archive that no
# longer matches) on stdout as warnings; they are expected here, and silenced.
_QUIET_CDS: Final[str] = "-Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:class+path=off"
_PENDING_SUFFIX: Final[str] = ".pending"
_BUILDING_SUFFIX: Final[str] = ".building"


def java_executable() -> str | None:
    """The ``java`` Spark will run: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def spark_home() -> str:
    """The Spark installation PySpark launches (the pip package's, unless
    ``SPARK_HOME`` says otherwise)."""
    from pyspark.find_spark_home import _find_spark_home

    return str(_find_spark_home())


def current_archive() -> Path | None:
    """The archive a session started now would use (it may not exist yet); ``None``
    without Java."""
    java = java_executable()
    return None if java is None else archive_path(java, spark_home())


def cache_dir() -> Path:
    """The folder holding the class-data archives (created on first use)."""
    root = os.environ.get("WATERMARKS_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dataflow-watermarks"


def archive_path(java: str, spark_home: str | os.PathLike[str]) -> Path:
    """The archive for ``java`` (an executable) running the jars of ``spark_home``:
    its name is a digest of the runtime's real path and size, each jar's name and size,
    and :data:`FAST_START_OPTIONS`."""
    real = Path(java).resolve()
    parts = [str(real), str(real.stat().st_size), FAST_START_OPTIONS]
    jars = Path(spark_home) / "jars"
    if jars.is_dir():
        parts.extend(f"{p.name}:{p.stat().st_size}" for p in sorted(jars.iterdir()))
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return cache_dir() / f"spark-cds-{key}.jsa"


def driver_java_options(java: str, spark_home: str | os.PathLike[str]) -> tuple[str, Path | None]:
    """The driver JVM's fast-start options, and the pending archive it will write at
    its exit (``None`` when the archive exists and is used). Falls back to the options
    without an archive when the cache folder cannot be written."""
    try:
        final = archive_path(java, spark_home)
        if final.is_file():
            check_archive(final)
            return f"{FAST_START_OPTIONS} -XX:SharedArchiveFile={final} {_QUIET_CDS}", None
        final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _check_folder(final.parent)
        _remove_stale(final.parent)
        if not _claim(final.with_name(final.name + _BUILDING_SUFFIX)):
            return FAST_START_OPTIONS, None  # another process builds it
        pending = final.with_name(f"{final.name}.{os.getpid()}{_PENDING_SUFFIX}")
        pending.unlink(missing_ok=True)
        return f"{FAST_START_OPTIONS} -XX:ArchiveClassesAtExit={pending} {_QUIET_CDS}", pending
    except UnsafeDirectoryError:
        raise
    except OSError:
        return FAST_START_OPTIONS, None


def _check_folder(folder: Path) -> None:
    """The cache folder must be this user's and writable by no one else."""
    st = os.stat(folder)
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeDirectoryError(
            f"refusing the class-data cache {folder}: owned by uid {st.st_uid} with mode "
            f"{stat.S_IMODE(st.st_mode):04o}; it must be yours and writable by you alone "
            "(chmod 700 it, or set WATERMARKS_CACHE_DIR)"
        )


def check_archive(archive: Path) -> None:
    """Before the JVM maps ``archive`` as code: it and its folder must be this user's
    and writable by no one else (UnsafeDirectoryError, one line, otherwise)."""
    _check_folder(archive.parent)
    try:
        check_private_file(archive)
    except UnsafeDirectoryError as err:
        raise UnsafeDirectoryError(
            f"{err} (the JVM would load this class-data archive as code)"
        ) from None


def publish_archive(process: Any, pending: Path, timeout: float = 600.0) -> bool:
    """Let the driver JVM ``process`` (a ``Popen`` whose stdin keeps it alive, as
    PySpark's gateway is) exit, and move the archive it wrote at ``pending`` to its
    final name if it exited cleanly within ``timeout`` seconds; else delete it. Returns
    whether it was published."""
    final = pending.with_name(pending.name.split(".jsa.", 1)[0] + ".jsa")
    marker = final.with_name(final.name + _BUILDING_SUFFIX)
    try:
        if process.stdin is not None:
            process.stdin.close()  # the gateway exits on end of input
        code = process.wait(timeout=timeout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        code = None
    try:
        if code == 0 and pending.is_file() and pending.stat().st_size > 0:
            os.chmod(pending, 0o600)
            os.replace(pending, final)
            return True
        pending.unlink(missing_ok=True)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            marker.unlink()
    return False


def _claim(marker: Path) -> bool:
    """Create ``marker`` holding this process's pid, unless a live process holds it."""
    for _ in range(2):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = marker.read_text().strip()
            except OSError:
                return False
            if holder.isdigit() and pid_alive(int(holder)):
                return False
            with contextlib.suppress(OSError):
                marker.unlink()  # its builder died: take over
            continue
        with os.fdopen(fd, "w") as out:
            out.write(str(os.getpid()))
        return True
    return False


def _remove_stale(folder: Path) -> None:
    """Delete pending archives whose writer (a process id in the name) is gone."""
    for path in folder.glob(f"*{_PENDING_SUFFIX}"):
        pid = path.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                path.unlink()

