"""Which engine runs a job: ``local`` (theory's numpy kernels, no JVM) or ``spark``.

``auto`` picks ``spark`` when a cluster is named (``--master`` or ``SPARK_REMOTE``) and
otherwise ``local`` when the trace's estimated in-memory size is at most a quarter of
the available memory (:func:`choose_engine` says why). The estimate is deliberately
generous: a Parquet file's rows times :data:`BYTES_PER_ROW`, a CSV file's size times
:data:`CSV_EXPANSION` (parsing holds the text and the columns at once).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq

__all__ = [
    "BYTES_PER_ROW",
    "CSV_EXPANSION",
    "ENGINES",
    "available_memory",
    "choose_engine",
    "estimated_bytes",
]

ENGINES: tuple[str, ...] = ("auto", "local", "spark")

#: In-memory bytes per trace row on the local engine (int64 columns, keys, sort copies).
BYTES_PER_ROW = 200

#: In-memory bytes per byte of CSV text while it is parsed and analysed.
CSV_EXPANSION = 6


def estimated_bytes(files: Sequence[Path]) -> int | None:
    """The estimated in-memory size of a trace read from ``files`` (bytes); None for
    no files (a remote trace)."""
    if not files:
        return None
    total = 0
    for f in files:
        if f.suffix.lower() == ".csv":
            total += f.stat().st_size * CSV_EXPANSION
        else:
            try:
                total += pq.ParquetFile(f).metadata.num_rows * BYTES_PER_ROW
            except (OSError, ValueError):  # not readable: the reader will say why
                total += f.stat().st_size * CSV_EXPANSION
    return total


def available_memory() -> int:
    """Available memory (bytes): ``MemAvailable`` of /proc/meminfo, else free pages."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def choose_engine(requested: str, master: str | None, need: int | None) -> tuple[str, str]:
    """``(engine, why)`` for ``requested`` (auto, local or spark); ``need`` is the
    trace's estimated in-memory size in bytes (None: a remote trace, which Spark reads)."""
    if requested not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, got {requested!r}")
    if requested != "auto":
        return requested, f"--engine {requested}"
    if master is not None:
        return "spark", f"--master {master} names a cluster"
    if os.environ.get("SPARK_REMOTE"):
        return "spark", "SPARK_REMOTE names a Spark Connect server"
    if need is None:
        return "spark", "the trace is remote: Spark reads it"
    have = available_memory()
    mib = 1 << 20
    if need <= have // 4:
        return "local", (
            f"the trace needs about {need / mib:,.0f} MiB in memory, at most a quarter of "
            f"the {have / mib:,.0f} MiB available"
        )
    return "spark", (
        f"the trace needs about {need / mib:,.0f} MiB in memory, more than a quarter of "
        f"the {have / mib:,.0f} MiB available"
    )
