"""Checks the command line makes before any work: where the output goes, and that it
may be written there.

An output directory may replace only an empty directory or a previous output: one
holding :data:`spark_backend.cli.atomic.MARKER`, or (written before the marker existed) the
files a report or a simulation writes (:data:`LEGACY_OUTPUTS`). It is never the input,
inside it or an ancestor of it, never the current directory or one holding it, and its
parent must be writable. Every refusal is a ValueError naming ``--out`` and the path.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from spark_backend.cli.atomic import MARKER

#: Files by which outputs written before :data:`MARKER` are recognised.
LEGACY_OUTPUTS = (("index.html", "strategies.csv"), ("series.parquet", "metrics.csv"))


def is_previous_output(path: Path) -> bool:
    """True for a directory this command line wrote (marker or legacy files)."""
    if (path / MARKER).is_file():
        return True
    return any(all((path / f).is_file() for f in files) for files in LEGACY_OUTPUTS)


def _local(path: str | os.PathLike[str]) -> Path | None:
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text.removeprefix("file://")
    elif "://" in text:
        return None
    return Path(os.path.realpath(text))


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or inner.is_relative_to(outer)


def check_out(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """The absolute output path, or ValueError if writing there could lose data or
    cannot work (see the module docstring). Touches nothing."""
    text = os.fspath(out)
    if not text.strip():
        raise ValueError("--out is empty: name an output directory")
    target = Path(os.path.realpath(text))
    if target.parent == target:
        raise ValueError(f"--out {text!r} is the root directory: name an output directory")
    if _within(Path(os.path.realpath(os.getcwd())), target):
        raise ValueError(
            f"--out {text!r} is the current directory or holds it; name a directory inside it"
        )
    for given in inputs:
        source = _local(given)
        if source is None:
            continue
        if _within(target, source):
            what = "is" if target == source else "is inside"
            raise ValueError(f"--out {text!r} {what} the input {os.fspath(given)!r}")
        if _within(source, target):
            raise ValueError(f"--out {text!r} holds the input {os.fspath(given)!r}")
    if target.exists() or target.is_symlink():
        if not target.is_dir():
            raise ValueError(
                f"--out {text!r} is an existing file, not an output directory; "
                "remove it or choose another --out"
            )
        mode = stat.S_IMODE(target.stat().st_mode)
        if not mode & stat.S_IWUSR or not os.access(target, os.W_OK):
            raise ValueError(
                f"--out {text!r} is a read-only directory (mode {mode:04o}); it is not "
                "replaced: make it writable or choose another --out"
            )
        if any(target.iterdir()) and not is_previous_output(target):
            raise ValueError(
                f"--out {text!r} is a directory that is neither empty nor a previous output "
                f"of watermarks (no {MARKER}); remove it or choose another --out"
            )
    _check_writable(target, text)
    return target


def _check_writable(target: Path, text: str) -> None:
    """The nearest existing ancestor of ``target`` must be a directory we can write."""
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"--out {text!r}: {parent} is a file, not a directory")
    try:  # os.access says yes to root even on a read-only file system: try it
        os.rmdir(tempfile.mkdtemp(prefix=".watermarks-probe-", dir=parent))
    except OSError as err:
        raise ValueError(f"--out {text!r}: cannot write in {parent} ({err.strerror})") from None


#: URI schemes Spark's Hadoop file systems read (others are refused before Spark starts).
SCHEMES = ("file", "hdfs", "viewfs", "webhdfs", "s3a", "s3", "gs", "abfs", "abfss", "wasb", "wasbs")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_trace_path(trace: str, option: str = "TRACE") -> None:
    """A local trace must be a regular file or a directory (a FIFO, a device or a link
    to one is refused, naming what it is); a URI must use one of :data:`SCHEMES`, and
    one pyarrow knows (``file://``, ``s3://``, ``hdfs://``, ...) must name a trace file
    or a directory holding some (listed, not read)."""
    from theory.data.location import list_trace_files, uri_file_system

    scheme, sep, _ = trace.partition("://")
    if sep and scheme.lower() not in SCHEMES:
        raise ValueError(
            f"{option} {trace!r}: unsupported scheme {scheme!r}:// "
            f"(a local path, or one of {', '.join(s + '://' for s in SCHEMES)})"
        )
    if sep and uri_file_system(trace) is not None:
        list_trace_files(trace)
        return
    if sep:
        return
    try:
        mode = os.stat(trace).st_mode
    except FileNotFoundError:
        what = "a broken symbolic link" if os.path.islink(trace) else "no such file or directory"
        raise FileNotFoundError(f"{option} {trace!r}: {what}") from None
    except OSError as err:
        raise ValueError(f"{option} {trace!r}: cannot be read ({err.strerror})") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        via = " (through a symbolic link)" if os.path.islink(trace) else ""
        raise ValueError(
            f"{option} {trace!r} is {_kind(mode)}{via}: a trace is a Parquet or CSV file "
            "or a directory of them"
        )


_MASTER = re.compile(
    r"local|local\[(\*|\d+)(,\d+)?\]|local-cluster\[\d+,\d+,\d+\]"
    r"|yarn|(spark|k8s|sc)://\S+"
)


def check_master(master: str | None) -> None:
    """A Spark master URL Spark knows (checked before its JVM starts, whose own error
    would be a Java stack)."""
    if master is not None and not _MASTER.fullmatch(master):
        raise ValueError(
            f"--master {master!r} is not a Spark master URL: local, local[*], local[N], "
            "local-cluster[N,C,M], spark://HOST:PORT, yarn, k8s://URL or sc://HOST"
        )


#: The most events ``simulate`` and ``demo`` generate (the generated traces' times, µs,
#: stay far inside int64 and Beam's timestamp range below it).
MAX_EVENTS = 10**12


def check_seed(seed: int) -> None:
    """A seed is a non-negative int64."""
    if not 0 <= seed < 2**63:
        raise ValueError(f"--seed must be in [0, 2**63), got {seed}")


def check_args(args: argparse.Namespace) -> None:
    """Every check the command line can make before any work: options, the trace's path,
    the output directory. ValueError / FileNotFoundError naming the option."""
    from spark_backend.session.session import parse_conf

    command = args.command
    if hasattr(args, "seed"):
        check_seed(args.seed)
    if command in ("simulate", "demo"):
        low = 1 if command == "simulate" else 2
        if not low <= args.events <= MAX_EVENTS:
            raise ValueError(
                f"--events must be >= {low} and at most {MAX_EVENTS:,}, got {args.events:,}"
            )
        from spark_backend.cli.seeds import check_seeds

        check_seeds(args.seeds)
    if command == "simulate":
        from theory.pipeline import chapter3

        chapter3.pipeline(watermark=args.watermark)
        parse_conf(args.conf)
        check_master(args.master)
        if args.partitions is not None and args.partitions < 1:
            raise ValueError(f"--partitions must be >= 1, got {args.partitions}")
        if args.blocks is not None and not 1 <= args.blocks <= chapter3.USERS:
            raise ValueError(f"--blocks must be in 1..{chapter3.USERS}, got {args.blocks}")
        if args.blocks is not None and args.trace is not None:
            raise ValueError("--blocks applies to generated events, not to --trace")
        if args.seeds > 1 and args.trace is not None:
            raise ValueError("--seeds applies to generated events, not to --trace")
    if command in ("demo", "analyze"):
        from spark_backend.report.comparison import check_request
        from theory.time import parse_duration

        engine = "spark" if args.engine == "spark" else "local"  # auto: checked once chosen
        check_request(strategy_specs(args.strategies), parse_duration(args.window), engine)
        parse_conf(args.conf)
        check_master(args.master)
    if getattr(args, "bootstrap", None) is not None and args.bootstrap < 1:
        raise ValueError(f"--bootstrap must be >= 1, got {args.bootstrap}")
    check_outputs(args)


def check_outputs(args: argparse.Namespace) -> Path:
    """The one ``--out`` guard of every command: each input the command declares (the
    ``inputs`` default its parser sets: its path arguments' names and how messages name
    them) is checked as a trace path, then ``--out`` against all of them
    (:func:`check_out`), and ``--save-trace`` (where the command has it) against both
    (:func:`spark_backend.cli.saved_trace.check_save_trace`). A command that declares
    no ``inputs`` is a programming error (RuntimeError)."""
    declared = getattr(args, "inputs", None)
    if declared is None:
        raise RuntimeError(f"command {args.command!r} declares no inputs for the --out guard")
    inputs = []
    for name, label in declared.items():
        value = getattr(args, name)
        if value is not None:
            check_trace_path(value, label)
            inputs.append(value)
    target = check_out(args.out, inputs)
    if getattr(args, "save_trace", None) is not None:
        from spark_backend.cli.saved_trace import check_save_trace

        check_save_trace(args.save_trace, target, inputs)
    return target


__all__ = [
    "LEGACY_OUTPUTS",
    "MAX_EVENTS",
    "SCHEMES",
    "check_args",
    "check_master",
    "check_out",
    "check_outputs",
    "check_seed",
    "check_trace_path",
    "is_previous_output",
]


def strategy_specs(text: str) -> tuple[str, ...]:
    """The strategy specs of a ``--strategies`` value (comma-separated, none empty)."""
    specs = tuple(s.strip() for s in text.split(",") if s.strip())
    if not specs:
        raise ValueError(f"--strategies names no strategy: {text!r}")
    return specs
