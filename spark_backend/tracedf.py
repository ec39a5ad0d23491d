"""Traces as Spark DataFrames: reading and validating files, and seeded generators.

A trace DataFrame has the columns of :mod:`theory.data.traces`: ``event_time`` and
``arrival_time`` (bigint µs since the epoch), ``key`` (bigint or string), ``value``
(double), and optionally ``partition`` (bigint) and ``publish_time`` (bigint µs). Row
order carries no meaning.

- :func:`read_trace_df` reads Parquet, CSV, or a directory of them and validates them with
  the rules of :data:`theory.data.traces.RULES`, applied as Spark column expressions: bad rows
  raise :class:`~theory.data.traces.TraceError` (``on_bad_rows="fail"``) or are removed and
  counted, with examples, in a :class:`~theory.data.traces.BadRowReport`
  (``"skip-and-report"``). Rows are numbered from 0 in input order, across the files of
  a directory in name order, exactly as :func:`theory.data.traces.read_trace` numbers them.
- :func:`generate_trace_df`, :func:`game_sessions_df` and :func:`chapter3_trace_df`
  generate seeded traces with ``spark.range``: every random draw is a counter-based hash
  of ``(seed, row id, stream)`` turned into a uniform in (0, 1), so a trace does not
  depend on how Spark partitions it. Event times are prefix sums of integer µs gaps,
  computed as a parallel scan (per-partition sums combined on the driver, then local
  cumulative sums). They follow the shapes of :mod:`theory.data.generators` (same parameters,
  same distributions) but not its numpy random stream, so rows differ from the numpy
  generators'.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from theory.columns import INT64_MAX, INT64_MIN, check_count, check_positive, check_timestamp
from theory.data.generators import MAX_DELAY, PLATFORMS, Delay
from theory.data.traces import (
    COLUMNS,
    REQUIRED_COLUMNS,
    RULES,
    TRACE_SUFFIXES,
    BadRowReport,
    OnBadRows,
    Rule,
    TraceError,
)
from theory.time import DAY, MAX_TIMESTAMP, MICROS_PER_SECOND, MIN_TIMESTAMP

__all__ = [
    "SUPPORTED_DELAYS",
    "chapter3_trace_df",
    "expected_span_us",
    "game_sessions_df",
    "generate_trace_df",
    "read_trace_df",
    "to_trace",
]

_MAX_EXAMPLES: Final[int] = 5


# =========================================================================== generators

#: scipy.stats names :func:`generate_trace_df` can sample in Spark (inverse CDF, or
#: Box-Muller for the normal family), with the parameters each takes besides loc/scale.
SUPPORTED_DELAYS: Final[Mapping[str, tuple[str, ...]]] = {
    "lognorm": ("s",),
    "norm": (),
    "expon": (),
    "pareto": ("b",),
    "lomax": ("c",),
    "uniform": (),
    "weibull_min": ("c",),
}


_DELAY: Final[Delay] = Delay("lognorm", s=1.0, scale=1.0)
_STRAGGLER_DELAY: Final[Delay] = Delay("pareto", b=1.5, scale=60.0)


def _uniform(seed: int, stream: int, idx: Column) -> Column:
    """A uniform in (0, 1) from a counter-based hash of (seed, row, stream): 53 bits."""
    h = F.xxhash64(F.lit(seed).cast("long"), idx, F.lit(stream).cast("long"))
    return (F.shiftrightunsigned(h, 11).cast("double") + F.lit(0.5)) * F.lit(2.0**-53)


def _std_normal(u1: Column, u2: Column) -> Column:
    """Box-Muller: a standard normal from two independent uniforms in (0, 1)."""
    return F.sqrt(F.lit(-2.0) * F.log(u1)) * F.cos(F.lit(2.0 * math.pi) * u2)


def _draw_seconds(dist: Delay, u1: Column, u2: Column) -> Column:
    """A draw of ``dist`` (its own unit: seconds for a Delay) as a double column."""
    kw = dist.kwargs
    allowed = SUPPORTED_DELAYS.get(dist.name)
    if allowed is None:
        raise ValueError(
            f"{dist!r}: Spark generators support {sorted(SUPPORTED_DELAYS)} distributions"
        )
    unknown = set(kw) - {"loc", "scale", *allowed}
    if unknown:
        raise ValueError(f"{dist!r}: unsupported parameters {sorted(unknown)}")
    loc = F.lit(float(kw.get("loc", 0.0)))
    scale = F.lit(float(kw.get("scale", 1.0)))
    if dist.name == "lognorm":
        x = F.exp(F.lit(kw["s"]) * _std_normal(u1, u2))
    elif dist.name == "norm":
        x = _std_normal(u1, u2)
    elif dist.name == "expon":
        x = -F.log(u1)
    elif dist.name == "pareto":
        x = F.pow(u1, F.lit(-1.0 / kw["b"]))
    elif dist.name == "lomax":
        x = F.pow(u1, F.lit(-1.0 / kw["c"])) - F.lit(1.0)
    elif dist.name == "uniform":
        x = u1
    else:  # weibull_min
        x = F.pow(-F.log(u1), F.lit(1.0 / kw["c"]))
    return loc + scale * x


def _delay_us(dist: Delay, u1: Column, u2: Column) -> Column:
    """``Delay.sample`` in Spark: µs, rounded, NaN -> 0, clipped to [0, MAX_DELAY]."""
    x = _draw_seconds(dist, u1, u2) * F.lit(float(MICROS_PER_SECOND))
    clipped = F.least(F.greatest(x, F.lit(0.0)), F.lit(float(MAX_DELAY)))
    return F.when(F.isnan(x), F.lit(0)).otherwise(F.rint(clipped)).cast("long")


def _plus_capped(t: Column, d: Column) -> Column:
    """``min(t + d, MAX_TIMESTAMP)`` for ``d >= 0`` without overflow."""
    return F.when(d > F.lit(MAX_TIMESTAMP) - t, F.lit(MAX_TIMESTAMP)).otherwise(t + d)




def _slices(spark: SparkSession, n: int, num_partitions: int | None) -> int:
    if num_partitions is not None:
        return check_count(num_partitions, "num_partitions", minimum=1)
    try:
        par = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect
        par = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    return max(1, min(max(par, -(-n // 2_000_000)), max(1, n)))


def _scan_offsets(gaps: DataFrame, group_cols: Sequence[str]) -> dict[tuple[int, ...], int]:
    """Per-(spark partition, group) sums of ``gap``: the first pass of the parallel scan."""
    rows = gaps.groupBy("_pid", *group_cols).agg(F.sum("gap").alias("s")).collect()
    return {(int(r["_pid"]), *(int(r[c]) for c in group_cols)): int(r["s"]) for r in rows}


def _prefix_sums(
    gaps: DataFrame, base: int, group: Literal["none", "user"], users: int = 1
) -> DataFrame:
    """``base`` + inclusive prefix sums of ``gap`` in ``id`` order (per user when
    ``group == "user"``, users interleaved as ``id % users``), as a parallel scan.

    ``gaps`` must hold ``id``, ``_pid`` (the ``spark.range`` partition) and ``gap``
    (bigint µs), each partition in ``id`` order. Integer sums make the result exact and
    independent of the partitioning.
    """
    if group == "none":
        sums = _scan_offsets(gaps, [])
        pids = sorted(k[0] for k in sums)
        start: dict[int, int] = {}
        acc = base
        for p in pids:
            start[p] = acc
            acc += sums[(p,)]

        def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            carry: int | None = None
            for b in batches:
                if b.num_rows == 0:
                    continue
                if carry is None:
                    carry = start[int(b.column("_pid")[0].as_py())]
                g = b.column("gap").to_numpy()
                out = np.cumsum(g, dtype=np.int64)
                out += np.int64(carry)
                carry = int(out[-1])
                yield pa.record_batch([b.column("id"), pa.array(out)], ["id", "event_time"])

        return gaps.mapInArrow(scan, "id long, event_time long")

    with_user = gaps.withColumn("_user", F.col("id") % F.lit(users))
    sums = _scan_offsets(with_user, ["_user"])
    pids = sorted({k[0] for k in sums})
    starts: dict[int, np.ndarray] = {}
    acc_u = np.full(users, base, dtype=np.int64)
    for p in pids:
        starts[p] = acc_u.copy()
        for u in range(users):
            acc_u[u] += sums.get((p, u), 0)

    def scan_users(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        carry: np.ndarray | None = None
        for b in batches:
            if b.num_rows == 0:
                continue
            if carry is None:
                carry = starts[int(b.column("_pid")[0].as_py())].copy()
            ids = b.column("id").to_numpy()
            g = b.column("gap").to_numpy()
            u = ids % users
            order = np.argsort(u, kind="stable")
            us, gs = u[order], g[order]
            cs = np.cumsum(gs, dtype=np.int64)
            first = np.flatnonzero(np.concatenate(([True], us[1:] != us[:-1])))
            seg_base = np.concatenate(([0], cs[first[1:] - 1]))
            seg = np.cumsum(np.concatenate(([False], us[1:] != us[:-1])))
            out_sorted = cs - seg_base[seg] + carry[us]
            last = np.concatenate((first[1:] - 1, [us.size - 1]))
            carry[us[last]] = out_sorted[last]
            out = np.empty_like(out_sorted)
            out[order] = out_sorted
            yield pa.record_batch([b.column("id"), pa.array(out)], ["id", "event_time"])

    return with_user.mapInArrow(scan_users, "id long, event_time long")


def _rekey_idle(
    key: Column,
    event_time: Column,
    u: Column,
    keys: int,
    partitions: int,
    idle: Sequence[int],
    interval: tuple[int, int] | None,
) -> Column:
    """Move keys of idle partitions during ``interval`` to a key of an active partition
    (same ``key // partitions``, a uniformly chosen active residue; one step down if that
    key does not exist)."""
    if not idle or interval is None:
        return key
    residues = [r for r in range(min(partitions, keys)) if r not in set(idle)]
    if not residues:
        raise ValueError(
            "idle_partitions leave no key in an active partition during idle_interval; "
            f"keys={keys}, partitions={partitions}, idle_partitions={list(idle)}"
        )
    lo, hi = interval
    r = F.element_at(
        F.array(*[F.lit(x).cast("long") for x in residues]),
        (F.floor(u * F.lit(len(residues))) + F.lit(1)).cast("int"),
    )
    moved = (key - key % F.lit(partitions)) + r
    moved = F.when(moved >= F.lit(keys), moved - F.lit(partitions)).otherwise(moved)
    hit = (
        (event_time >= F.lit(lo))
        & (event_time < F.lit(hi))
        & (key % F.lit(partitions)).isin(*[int(p) for p in idle])
    )
    return F.when(hit, moved).otherwise(key)


def generate_trace_df(
    spark: SparkSession,
    n: int,
    *,
    seed: int,
    start: int = 0,
    rate: float = 1000.0,
    keys: int = 100,
    partitions: int = 4,
    delay: Delay = _DELAY,
    stragglers: float = 0.0,
    straggler_delay: Delay = _STRAGGLER_DELAY,
    bursts: int = 0,
    burst_factor: float = 10.0,
    burst_duration: float = 1.0,
    idle_partitions: Iterable[int] = (),
    idle_interval: tuple[int, int] | None = None,
    key_prefix: str | None = None,
    num_partitions: int | None = None,
) -> DataFrame:
    """The Spark twin of :func:`theory.data.generators.generate_trace`: ``n`` rows from
    ``spark.range``, same parameters and distributions, a different random stream.

    - Event times are a Poisson process at ``rate`` events/s (exponential gaps rounded to
      µs, prefix-summed from ``start``); ``bursts`` runs of ``rate*burst_factor*
      burst_duration`` rows at seeded positions have their gaps divided by
      ``burst_factor``.
    - ``key`` is uniform over ``range(keys)``, ``partition = key % partitions``; keys of
      ``idle_partitions`` move to an active partition for events in ``idle_interval``
      (µs, half-open), so those partitions are idle there. ``key_prefix`` makes keys
      strings (``f"{key_prefix}{key}"``).
    - ``arrival_time = event_time + delay`` (µs), plus ``straggler_delay`` for a
      ``stragglers`` fraction of rows, capped at MAX_TIMESTAMP. ``value`` is 1.0.

    Delays may be any of :data:`SUPPORTED_DELAYS`. The DataFrame is lazy apart from the
    first pass of the event-time scan, which runs here.
    """
    n = check_count(n, "n")
    seed = check_count(seed, "seed")
    start = check_timestamp(start, "start")
    rate = check_positive(rate, "rate")
    keys = check_count(keys, "keys", minimum=1)
    partitions = check_count(partitions, "partitions", minimum=1)
    if not 0.0 <= float(stragglers) <= 1.0:
        raise ValueError(f"stragglers must be a fraction in [0, 1], got {stragglers!r}")
    bursts = check_count(bursts, "bursts")
    burst_factor = check_positive(burst_factor, "burst_factor")
    burst_duration = check_positive(burst_duration, "burst_duration")
    idle = sorted({check_count(p, "idle_partitions[]") for p in idle_partitions})
    if any(p >= partitions for p in idle):
        raise ValueError(f"idle_partitions must be in [0, partitions={partitions}), got {idle}")
    if idle_interval is not None:
        lo, hi = (check_timestamp(x, "idle_interval") for x in idle_interval)
        if hi <= lo:
            raise ValueError(f"idle_interval must have end > start, got {idle_interval}")
        idle_interval = (lo, hi)
    for dist, name in ((delay, "delay"), (straggler_delay, "straggler_delay")):
        if not isinstance(dist, Delay):
            raise ValueError(f"{name} must be a Delay, got {dist!r}")
        _draw_seconds(dist, F.lit(0.5), F.lit(0.5))  # rejects unsupported distributions early

    slices = _slices(spark, n, num_partitions)
    ids = spark.range(0, n, 1, slices)
    idc = F.col("id")
    gap_s = -F.log(_uniform(seed, 0, idc)) / F.lit(rate)
    if bursts and n:
        run = max(1, round(rate * burst_factor * burst_duration))
        rng = np.random.default_rng([seed, 1])
        starts = rng.integers(0, max(1, n - run + 1), bursts)
        in_burst = F.lit(False)
        for s in sorted(int(x) for x in starts):
            in_burst = in_burst | ((idc >= F.lit(s)) & (idc < F.lit(s + run)))
        gap_s = F.when(in_burst, gap_s / F.lit(burst_factor)).otherwise(gap_s)
    gaps = ids.select(
        "id",
        F.spark_partition_id().alias("_pid"),
        F.rint(gap_s * F.lit(float(MICROS_PER_SECOND))).cast("long").alias("gap"),
    )
    times = _prefix_sums(gaps, start, "none")
    idc = F.col("id")
    key = F.floor(_uniform(seed, 1, idc) * F.lit(keys)).cast("long")
    key = _rekey_idle(
        key, F.col("event_time"), _uniform(seed, 2, idc), keys, partitions, idle, idle_interval
    )
    d = _delay_us(delay, _uniform(seed, 3, idc), _uniform(seed, 4, idc))
    if stragglers > 0:
        extra = _delay_us(straggler_delay, _uniform(seed, 6, idc), _uniform(seed, 7, idc))
        d = F.when(_uniform(seed, 5, idc) < F.lit(float(stragglers)), d + extra).otherwise(d)
    df = times.select(idc, F.col("event_time"), key.alias("key"), d.alias("_delay"))
    key_out = (
        F.col("key")
        if key_prefix is None
        else F.concat(F.lit(key_prefix), F.col("key").cast("string"))
    )
    return df.select(
        F.col("event_time"),
        _plus_capped(F.col("event_time"), F.col("_delay")).alias("arrival_time"),
        key_out.alias("key"),
        F.lit(1.0).alias("value"),
        (F.col("key") % F.lit(partitions)).alias("partition"),
    )


def game_sessions_df(
    spark: SparkSession,
    n: int,
    *,
    seed: int,
    platform: Literal["mobile", "console"] = "mobile",
    start: int = 0,
    users: int = 100,
    first_user: int = 0,
    partitions: int = 4,
    events_per_session: float = 10.0,
    within_gap: float = 5.0,
    max_within_gap: float = 30.0,
    between_gap: float = 600.0,
    min_between_gap: float = 180.0,
    idle_partitions: Iterable[int] = (),
    idle_interval: tuple[int, int] | None = None,
    num_partitions: int | None = None,
) -> DataFrame:
    """The Spark twin of :func:`theory.data.generators.game_sessions_trace`: user game events
    in per-user sessions (the *Streaming Systems* chapter-3 input), ``n`` rows.

    Row ``id`` is event ``id // users`` of user ``first_user + id % users``. A user's
    first gap is uniform on [0, ``between_gap``) s; each later event starts a new session
    with probability ``1/events_per_session`` (geometric session lengths with that mean),
    after ``min_between_gap`` + exponential(``between_gap``) s; inside a session gaps
    are exponential(``within_gap``) s capped at ``max_within_gap``. Delays follow
    :data:`theory.data.generators.PLATFORMS` (log-normal, Pareto stragglers). Users of
    ``idle_partitions`` (``user % partitions``) pause during ``idle_interval`` (µs): their
    events from its start on shift past its end, so those partitions are idle there.
    ``key`` = user, ``value`` = score in 1..100, ``partition = user % partitions``.
    """
    n = check_count(n, "n")
    seed = check_count(seed, "seed")
    if platform not in PLATFORMS:
        raise ValueError(f"platform must be one of {sorted(PLATFORMS)}, got {platform!r}")
    start = check_timestamp(start, "start")
    users = check_count(users, "users", minimum=1)
    first_user = check_count(first_user, "first_user")
    partitions = check_count(partitions, "partitions", minimum=1)
    eps = check_positive(events_per_session, "events_per_session")
    if eps < 1:
        raise ValueError(f"events_per_session must be >= 1, got {events_per_session}")
    within_gap = check_positive(within_gap, "within_gap")
    max_within_gap = check_positive(max_within_gap, "max_within_gap")
    between_gap = check_positive(between_gap, "between_gap")
    if not math.isfinite(float(min_between_gap)) or min_between_gap <= max_within_gap:
        raise ValueError(
            f"min_between_gap ({min_between_gap} s) must exceed max_within_gap "
            f"({max_within_gap} s) so sessions stay separate"
        )
    idle = sorted({check_count(p, "idle_partitions[]") for p in idle_partitions})
    if any(p >= partitions for p in idle):
        raise ValueError(f"idle_partitions must be in [0, partitions={partitions}), got {idle}")
    if idle_interval is not None:
        lo, hi = (check_timestamp(x, "idle_interval") for x in idle_interval)
        if hi <= lo:
            raise ValueError(f"idle_interval must have end > start, got {idle_interval}")
        idle_interval = (lo, hi)
    profile = PLATFORMS[platform]

    slices = _slices(spark, n, num_partitions)
    idc = F.col("id")
    first = idc < F.lit(users)
    new_session = _uniform(seed, 1, idc) < F.lit(1.0 / eps)
    u0 = _uniform(seed, 0, idc)
    gap_s = (
        F.when(first, u0 * F.lit(between_gap))
        .when(new_session, F.lit(float(min_between_gap)) - F.log(u0) * F.lit(between_gap))
        .otherwise(F.least(-F.log(u0) * F.lit(within_gap), F.lit(max_within_gap)))
    )
    gaps = spark.range(0, n, 1, slices).select(
        "id",
        F.spark_partition_id().alias("_pid"),
        F.rint(gap_s * F.lit(float(MICROS_PER_SECOND))).cast("long").alias("gap"),
    )
    times = _prefix_sums(gaps, start, "user", users)
    user = F.col("id") % F.lit(users) + F.lit(first_user)
    et = F.col("event_time")
    if idle and idle_interval is not None:
        lo, hi = idle_interval
        paused = (user % F.lit(partitions)).isin(*idle) & (et >= F.lit(lo))
        et = F.when(paused, _plus_capped(et, F.lit(hi - lo))).otherwise(et)
    idc = F.col("id")
    d = _delay_us(profile.delay, _uniform(seed, 3, idc), _uniform(seed, 4, idc))
    if profile.stragglers > 0:
        extra = _delay_us(profile.straggler_delay, _uniform(seed, 6, idc), _uniform(seed, 7, idc))
        d = F.when(_uniform(seed, 5, idc) < F.lit(profile.stragglers), d + extra).otherwise(d)
    score = F.lit(1.0) + F.floor(_uniform(seed, 2, idc) * F.lit(100.0))
    df = times.select(
        et.alias("event_time"), d.alias("_delay"), user.alias("key"), score.alias("value")
    )
    return df.select(
        "event_time",
        _plus_capped(F.col("event_time"), F.col("_delay")).alias("arrival_time"),
        "key",
        "value",
        (F.col("key") % F.lit(partitions)).alias("partition"),
    )


def expected_span_us(
    n: int,
    users: int = 100,
    events_per_session: float = 10.0,
    within_gap: float = 5.0,
    max_within_gap: float = 30.0,
    between_gap: float = 600.0,
    min_between_gap: float = 180.0,
) -> int:
    """The expected event-time span (µs) of :func:`game_sessions_df` with these settings."""
    capped_within = within_gap * (1.0 - math.exp(-max_within_gap / within_gap))
    p_new = 1.0 / events_per_session
    mean_gap = p_new * (min_between_gap + between_gap) + (1.0 - p_new) * capped_within
    return int(n / max(1, users) * mean_gap * MICROS_PER_SECOND)


def chapter3_trace_df(
    spark: SparkSession,
    events: int,
    *,
    seed: int = 0,
    users: int = 100,
    partitions: int = 4,
    idle_partitions: Iterable[int] = (3,),
    idle_fraction: tuple[float, float] = (0.4, 0.5),
    num_partitions: int | None = None,
) -> DataFrame:
    """The demo's default trace: chapter-3 mobile and console game sessions in one frame.

    ``events - events // 2`` mobile events (users ``0 .. users-1``, seed ``seed``) and
    ``events // 2`` console events (users ``users .. 2*users-1``, seed ``seed + 1``), as
    :func:`theory.pipeline.chapter3.traces` splits them. ``idle_partitions`` pause during the
    ``idle_fraction`` part of the expected event-time span, so they are idle there.
    """
    events = check_count(events, "events")
    half = events // 2
    span = expected_span_us(max(events - half, 1), users)
    lo, hi = idle_fraction
    if not 0.0 <= lo < hi:
        raise ValueError(f"idle_fraction must be (lo, hi) with 0 <= lo < hi, got {idle_fraction}")
    interval = (int(span * lo), max(int(span * hi), int(span * lo) + 1))
    common: dict[str, Any] = {
        "users": users,
        "partitions": partitions,
        "idle_partitions": tuple(idle_partitions),
        "idle_interval": interval,
        "num_partitions": num_partitions,
    }
    mobile = game_sessions_df(spark, events - half, seed=seed, platform="mobile", **common)
    console = game_sessions_df(
        spark, half, seed=seed + 1, platform="console", first_user=users, **common
    )
    return mobile.unionByName(console)


def to_trace(df: DataFrame) -> Any:
    """Collect a trace DataFrame to a :class:`theory.data.traces.Trace` through Arrow."""
    from theory.data.traces import Trace

    table = df.toArrow()
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
    key = cols.get("key", np.zeros(table.num_rows, dtype=np.int64))
    if key.dtype.kind not in "iu":
        key = key.astype(object)
    return Trace(
        cols["event_time"].astype(np.int64),
        cols["arrival_time"].astype(np.int64),
        key,
        cols.get("value", np.ones(table.num_rows)),
        cols["partition"].astype(np.int64) if "partition" in cols else None,
        cols["publish_time"].astype(np.int64) if "publish_time" in cols else None,
    )


# =========================================================================== reading

_ISO_RE: Final[str] = (
    r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}([.,]\d{1,6})?)?)?)?"
    r"(Z|z|[+-]\d{2}(:?\d{2}(:?\d{2})?)?)?$"
)
_INT_RE: Final[str] = r"^[+-]?\d+$"
_FLOAT_RE: Final[str] = r"^[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)$"
_NAN_RE: Final[str] = r"(?i)^[+-]?nan$"
_INF_RE: Final[str] = r"(?i)^[+-]?inf(inity)?$"
_TRIM_RE: Final[str] = r"(?U)^\s+|\s+$"
#: pyarrow's default CSV null values.
_CSV_NULLS: Final[tuple[str, ...]] = tuple(pacsv.ConvertOptions().null_values)


@dataclass(frozen=True)
class _Target:
    lo: int
    hi: int
    temporal: bool


_TIMESTAMP = _Target(MIN_TIMESTAMP, MAX_TIMESTAMP, True)
_PARTITION = _Target(0, INT64_MAX, False)
_KEY = _Target(INT64_MIN, INT64_MAX, False)

Flags = dict[str, Column]


def _ints_from_long(v: Column, t: _Target) -> tuple[Column, Flags]:
    null = v.isNull()
    out = ~null & ((v < F.lit(t.lo)) | (v > F.lit(t.hi)))
    return v.cast("long"), {"null": null, "out_of_range": out}


def _ints_from_double(d: Column, t: _Target) -> tuple[Column, Flags]:
    """Theory's ``_ints_from_floats``: NaN is null, non-integral values are not integers."""
    null = d.isNull() | F.isnan(d)
    out = ~null & (
        (d == F.lit(float("inf")))
        | (d == F.lit(float("-inf")))
        | (d < F.lit(float(t.lo)))
        | (d > F.lit(float(t.hi)))
        | (d >= F.lit(2.0**63))
        | (d < F.lit(-(2.0**63)))
    )
    nonint = ~null & ~out & (d != F.rint(d))
    ok = ~(null | out | nonint)
    ints = F.when(ok, d.try_cast("long"))
    out2 = ok & ((ints < F.lit(t.lo)) | (ints > F.lit(t.hi)))
    return ints, {"null": null, "not_integer": nonint, "out_of_range": out | out2}


def _trimmed(raw: Column) -> Column:
    return F.regexp_replace(raw, _TRIM_RE, "")


# String columns are parsed in two steps so that Spark generates small code: first the
# trimmed text, its class and its candidate values as columns (``_string_prep``), then
# the values and rule flags from those columns.
_NULL, _INT, _NAN, _INF, _NUM, _ISO, _OTHER = range(7)


def _string_prep(c: str) -> list[Column]:
    """Step one for string column ``c``: ``_s_c`` (trimmed), ``_k_c`` (class),
    ``_i_c``/``_d_c``/``_t_c`` (as integer, number, ISO time in µs)."""
    raw = F.col(f"`{c}`")
    s = F.col(f"_s_{c}")
    kind = (
        F.when(raw.isNull() | (s == F.lit("")), _NULL)
        .when(s.rlike(_INT_RE), _INT)
        .when(s.rlike(_NAN_RE), _NAN)
        .when(s.rlike(_INF_RE), _INF)
        .when(s.rlike(_FLOAT_RE), _NUM)
        .when(s.rlike(_ISO_RE), _ISO)
        .otherwise(_OTHER)
    )
    return [
        kind.alias(f"_k_{c}"),
        F.when(F.col(f"_k_{c}") == _INT, s.try_cast("long")).alias(f"_i_{c}"),
        F.when(F.col(f"_k_{c}").isin(_INT, _NUM, _NAN, _INF), s.try_cast("double")).alias(
            f"_d_{c}"
        ),
        F.when(F.col(f"_k_{c}") == _ISO, F.unix_micros(F.try_to_timestamp(s))).alias(f"_t_{c}"),
    ]


def _ints_from_string(c: str, t: _Target) -> tuple[Column, Flags]:
    """Theory's per-value string parsing: integers, then numbers, then ISO-8601 times
    (from the columns of :func:`_string_prep`)."""
    k = F.col(f"_k_{c}")
    iv = F.col(f"_i_{c}")
    is_int = k == _INT
    int_out = is_int & (iv.isNull() | (iv < F.lit(t.lo)) | (iv > F.lit(t.hi)))
    is_num = k == _NUM
    dv, dflags = _ints_from_double(F.col(f"_d_{c}"), t)
    if t.temporal:
        tv = F.col(f"_t_{c}")
        is_time = (k == _ISO) & tv.isNotNull()
        t_out = is_time & ((tv < F.lit(t.lo)) | (tv > F.lit(t.hi)))
        unparseable = (k == _OTHER) | ((k == _ISO) & tv.isNull())
    else:
        tv = F.lit(None).cast("long")
        is_time = F.lit(False)
        t_out = F.lit(False)
        unparseable = k.isin(_ISO, _OTHER)
    value = F.when(is_int & ~int_out, iv).when(is_num, dv).when(is_time & ~t_out, tv)
    flags = {
        "null": k.isin(_NULL, _NAN),
        "unparseable": unparseable,
        "not_integer": is_num & dflags["not_integer"],
        "out_of_range": int_out | (k == _INF) | (is_num & dflags["out_of_range"]) | t_out,
    }
    return value.cast("long"), flags


def _unsupported(column: str, dtype: T.DataType, path: str | None) -> TraceError:
    rule = next(r for r in RULES if r.kind == "unsupported_type")
    return TraceError(
        f"{rule.description} ({dtype.simpleString()})", row=None, column=column, path=path
    )


def _parse_int_column(
    name: str, raw: Column, dtype: T.DataType, t: _Target, path: str | None
) -> tuple[Column, Flags]:
    if isinstance(dtype, T.NullType):
        return F.lit(None).cast("long"), {"null": F.lit(True)}
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return _ints_from_long(raw.cast("long"), t)
    if isinstance(dtype, T.DecimalType) and dtype.scale == 0 and dtype.precision >= 20:
        v = raw.try_cast("long")  # Parquet UINT64 arrives as decimal(20, 0)
        value, flags = _ints_from_long(v, t)
        flags["null"] = raw.isNull()
        flags["out_of_range"] = ~raw.isNull() & (v.isNull() | flags["out_of_range"])
        return value, flags
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return _ints_from_double(raw.cast("double"), t)
    if t.temporal and isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        us = F.unix_micros(raw.cast("timestamp"))
        return _ints_from_long(us, t)
    if t.temporal and isinstance(dtype, T.DateType):
        days = F.unix_date(raw).cast("long")
        ok = days.between(F.lit(MIN_TIMESTAMP // DAY + 1), F.lit(MAX_TIMESTAMP // DAY))
        value, flags = _ints_from_long(F.when(ok, days * F.lit(DAY)), t)
        flags["out_of_range"] = ~raw.isNull() & (~ok | flags["out_of_range"])
        flags["null"] = raw.isNull()
        return value, flags
    if isinstance(dtype, T.StringType):
        return _ints_from_string(name, t)
    raise _unsupported(name, dtype, path)


def _parse_value_column(
    name: str, raw: Column, dtype: T.DataType, path: str | None
) -> tuple[Column, Flags]:
    if isinstance(dtype, T.NullType):
        return F.lit(None).cast("double"), {"null": F.lit(True)}
    if isinstance(
        dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType)
    ):
        v = raw.cast("double")
        null = raw.isNull()
        bad = ~null & (F.isnan(v) | (F.abs(v) == F.lit(float("inf"))))
        return v, {"null": null, "not_finite": bad}
    if isinstance(dtype, T.StringType):
        k = F.col(f"_k_{name}")
        v = F.col(f"_d_{name}")
        num = k.isin(_INT, _NAN, _INF, _NUM)
        return v, {
            "null": k == _NULL,
            "unparseable": k.isin(_ISO, _OTHER),
            "not_finite": num & (F.isnan(v) | (F.abs(v) == F.lit(float("inf")))),
        }
    raise _unsupported(name, dtype, path)


@dataclass
class _Group:
    """Files read by one Spark reader: same format and the same columns and types."""

    fmt: str
    files: list[tuple[int, Path]]  # (file index, path)
    header: tuple[str, ...]  # CSV header or Parquet column names


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _trace_files(directory: Path) -> list[Path]:
    files = sorted(
        p
        for p in directory.iterdir()
        if p.is_file()
        and p.suffix.lower() in TRACE_SUFFIXES
        and not p.name.startswith((".", "_"))
    )
    if not files:
        raise FileNotFoundError(
            f"directory {str(directory)!r} holds no trace files (.parquet, .pq, .csv)"
        )
    return files


def _format_of(path: Path) -> str:
    s = path.suffix.lower()
    if s not in TRACE_SUFFIXES:
        raise ValueError(
            f"path {str(path)!r}: unknown trace format {s!r} (use .parquet, .pq or .csv)"
        )
    return "csv" if s == ".csv" else "parquet"


def _csv_header(path: Path) -> tuple[str, ...]:
    if path.stat().st_size == 0:
        raise TraceError("empty file: no header and no rows", path=str(path))
    with path.open(newline="", encoding="utf-8-sig") as fh:
        try:
            row = next(csv.reader(fh))
        except StopIteration:
            row = []
    if not row:
        raise TraceError("empty file: no header and no rows", path=str(path))
    return tuple(row)


def _parquet_header(path: Path) -> tuple[str, ...]:
    if path.stat().st_size == 0:
        raise TraceError("empty file: not a Parquet file (0 bytes)", path=str(path))
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise TraceError(f"not a readable Parquet file: {err}", path=str(path)) from None
    return tuple(f"{f.name}:{f.type}" for f in schema if f.name in COLUMNS)


def _groups_of(files: list[Path]) -> list[_Group]:
    groups: dict[tuple[str, tuple[str, ...]], _Group] = {}
    for i, f in enumerate(files):
        fmt = _format_of(f)
        header = _csv_header(f) if fmt == "csv" else _parquet_header(f)
        g = groups.setdefault((fmt, header), _Group(fmt, [], header))
        g.files.append((i, f))
    return list(groups.values())


def _read_group(spark: SparkSession, g: _Group) -> DataFrame:
    paths = [str(p) for _, p in g.files]
    if g.fmt == "csv":
        schema = T.StructType([T.StructField(c, T.StringType(), True) for c in g.header])
        reader = (
            spark.read.schema(schema)
            .option("header", True)
            .option("enforceSchema", True)
            .option("escape", '"')
            .option("mode", "PERMISSIVE")
        )
        df = reader.csv(paths)
    else:
        df = spark.read.parquet(*paths)
    names = F.create_map(*[x for i, p in g.files for x in (F.lit(p.name), F.lit(i))])
    cols = [c for c in df.columns if c in COLUMNS]

    def col(c: str) -> Column:
        raw = F.col(f"`{c}`")
        if g.fmt != "csv":
            return raw
        # the strings pyarrow's CSV reader takes as null (theory reads CSV with pyarrow)
        return F.when(raw.isin(*_CSV_NULLS), F.lit(None).cast("string")).otherwise(raw).alias(c)

    return df.select(
        *[col(c) for c in cols],
        F.element_at(names, F.col("_metadata.file_name")).cast("int").alias("_file"),
        F.col("_metadata.file_block_start").alias("_blk"),
        F.monotonically_increasing_id().alias("_mid"),
    )


# (file index, file path (remote only), block start, rows, first row id, counts, bad rows)
_BlockStats = tuple[int, str, int, int, int, dict[str, int], int]


@dataclass
class _Parsed:
    df: DataFrame  # raw columns as _raw_<c>, parsed columns, flags _bad_<i>, _file, _blk, _mid
    rules: list[Rule]  # the rule of each flag column _bad_<i>
    columns: list[str]  # trace columns present


def _parse_group(
    df: DataFrame,
    g: _Group,
    key_kind: dict[int, str],
    require_causal: bool,
    path_of: dict[int, str],
) -> _Parsed:
    present = [c for c in df.columns if c in COLUMNS]
    first_path = path_of[g.files[0][0]]
    types = {f.name: f.dataType for f in df.schema.fields}
    strings = [c for c in present if isinstance(types[c], T.StringType)]
    if strings:
        df = df.select("*", *[_trimmed(F.col(f"`{c}`")).alias(f"_s_{c}") for c in strings])
        df = df.select("*", *[x for c in strings for x in _string_prep(c)[:1]])
        df = df.select("*", *[x for c in strings for x in _string_prep(c)[1:]])
    parsed: dict[str, tuple[Column, Flags]] = {}
    for c in present:
        raw = F.col(f"`{c}`")
        if c in ("event_time", "arrival_time", "publish_time"):
            parsed[c] = _parse_int_column(c, raw, types[c], _TIMESTAMP, first_path)
        elif c == "partition":
            parsed[c] = _parse_int_column(c, raw, types[c], _PARTITION, first_path)
        elif c == "value":
            parsed[c] = _parse_value_column(c, raw, types[c], first_path)
        else:  # key
            parsed[c] = _parse_key(raw, types[c], g, key_kind, first_path)
    flags: list[tuple[Rule, Column]] = []
    for rule in RULES:
        if rule.kind in ("missing_column", "unsupported_type"):
            continue
        if rule.kind == "not_causal":
            if not require_causal:
                continue
            ev, ef = parsed["event_time"]
            av, af = parsed["arrival_time"]
            ok = ~_any(list(ef.values()) + list(af.values()))
            flags.append((rule, ok & (av < ev)))
            continue
        got = parsed.get(rule.column)
        if got is None or rule.kind not in got[1]:
            continue
        flags.append((rule, got[1][rule.kind]))
    out = df.select(
        *[F.col(f"`{c}`").alias(f"_raw_{c}") for c in present],
        *[parsed[c][0].alias(c) for c in present],
        *[F.coalesce(f, F.lit(False)).alias(f"_bad_{i}") for i, (_, f) in enumerate(flags)],
        "_file",
        "_blk",
        "_mid",
    )
    return _Parsed(out, [r for r, _ in flags], present)


def _any(cols: Sequence[Column]) -> Column:
    out: Column = F.lit(False)
    for c in cols:
        out = out | F.coalesce(c, F.lit(False))
    return out


def _parse_key(
    raw: Column, dtype: T.DataType, g: _Group, key_kind: dict[int, str], path: str
) -> tuple[Column, Flags]:
    """Keys: bigint or string. A CSV file's keys are integers when all look like integers,
    numbers when all look like numbers (integral ones become ints), else strings: the
    types pyarrow infers for that file. Mixed int and str files give strings."""
    if isinstance(dtype, T.StringType) and g.fmt == "parquet":
        return raw, {"null": raw.isNull()}
    if not isinstance(dtype, T.StringType):
        return _parse_int_column("key", raw, dtype, _KEY, path)
    idx = [i for i, _ in g.files]
    kinds = {key_kind.get(i, "int") for i in idx}
    if kinds == {"str"}:
        return raw, {"null": raw.isNull()}
    value, num_flags = _ints_from_string("key", _KEY)
    num_flags["unparseable"] = F.lit(False)  # a file with such keys has string keys
    if "str" not in kinds:
        return value, num_flags
    is_str = F.col("_file").isin(*[i for i in idx if key_kind.get(i) == "str"])
    flags = {k: F.when(is_str, F.lit(False)).otherwise(v) for k, v in num_flags.items()}
    flags["null"] = F.when(is_str, raw.isNull()).otherwise(num_flags["null"])
    return F.when(is_str, raw).otherwise(value.cast("string")), flags


def _csv_key_kinds(
    spark: SparkSession, groups: list[_Group], dfs: list[DataFrame]
) -> dict[int, str]:
    """Per CSV file with a key column: 'int', 'num' or 'str' (pyarrow's inference)."""
    kinds: dict[int, str] = {}
    for g, df in zip(groups, dfs, strict=True):
        if g.fmt != "csv" or "key" not in df.columns:
            continue
        s = _trimmed(F.col("key"))
        nonnull = F.col("key").isNotNull() & (s != F.lit(""))
        rows = (
            df.groupBy("_file")
            .agg(
                F.sum(F.when(nonnull & ~s.rlike(_INT_RE), 1).otherwise(0)).alias("non_int"),
                F.sum(
                    F.when(
                        nonnull & ~s.rlike(_INT_RE) & ~s.rlike(_FLOAT_RE) & ~s.rlike(_NAN_RE)
                        & ~s.rlike(_INF_RE),
                        1,
                    ).otherwise(0)
                ).alias("non_num"),
            )
            .collect()
        )
        for r in rows:
            kinds[int(r["_file"])] = (
                "int" if not r["non_int"] else ("num" if not r["non_num"] else "str")
            )
    return kinds


def read_trace_df(
    spark: SparkSession,
    path: str | os.PathLike[str],
    *,
    on_bad_rows: OnBadRows = "fail",
    require_causal: bool = False,
    allow_empty: bool = False,
) -> tuple[DataFrame, BadRowReport]:
    """Read and validate a trace: a Parquet (.parquet/.pq) or CSV (.csv) file, or a
    directory of them (read in name order; hidden ``.``/``_`` names skipped).

    Validation applies :data:`theory.data.traces.RULES` as Spark expressions, with theory's
    parsing: timestamps (µs) may be integers, integral floats, timestamps or dates, or
    strings holding integers, numbers or ISO-8601 times (naive = UTC); ``key`` defaults to
    0 and ``value`` to 1.0; a CSV file's keys are int64 when they all look like integers.
    ``on_bad_rows="fail"`` raises :class:`TraceError` for the lowest bad row (naming the
    row, the column and the file); ``"skip-and-report"`` drops bad rows and counts them,
    per rule with up to 5 examples, in the report. Examples hold the raw value as read
    (CSV fields are strings). Errors: TraceError for a missing column, an unsupported
    column type, an empty file, or (unless ``allow_empty``) a trace with no rows;
    FileNotFoundError for a missing path or a directory with no trace files.

    Returns the validated DataFrame (lazy; it re-parses on every action, so persist it
    for repeated use) and the report. Runs one or two Spark jobs (more when rows are bad).
    """
    if on_bad_rows not in ("fail", "skip-and-report"):
        raise ValueError(f"on_bad_rows must be 'fail' or 'skip-and-report', got {on_bad_rows!r}")
    text = os.fspath(path)
    if _is_remote(text):
        return _read_remote(spark, text, on_bad_rows, require_causal, allow_empty)
    p = Path(text.removeprefix("file://"))
    if not p.exists():
        raise FileNotFoundError(f"no such file or directory: {text!r}")
    files = _trace_files(p) if p.is_dir() else [p]
    path_of = {i: (str(p / f.name) if p.is_dir() else str(p)) for i, f in enumerate(files)}
    groups = _groups_of(files)
    return _validate(spark, groups, path_of, on_bad_rows, require_causal, allow_empty)


def _read_remote(
    spark: SparkSession, path: str, on_bad_rows: OnBadRows, require_causal: bool, allow_empty: bool
) -> tuple[DataFrame, BadRowReport]:
    """A non-local dataset (hdfs://, s3a://, ...): one format, one schema, read by Spark."""
    fmt = "csv" if path.lower().rstrip("/").endswith(".csv") else "parquet"
    if fmt == "csv":
        header = tuple(spark.read.option("header", True).csv(path).columns)
    else:
        header = tuple(spark.read.parquet(path).columns)
    g = _Group(fmt, [(0, Path(path))], header)
    return _validate(spark, [g], {0: path}, on_bad_rows, require_causal, allow_empty, remote=path)


def _validate(
    spark: SparkSession,
    groups: list[_Group],
    path_of: dict[int, str],
    on_bad_rows: OnBadRows,
    require_causal: bool,
    allow_empty: bool,
    remote: str | None = None,
) -> tuple[DataFrame, BadRowReport]:
    if remote is None:
        dfs = [_read_group(spark, g) for g in groups]
    else:
        g = groups[0]
        reader = spark.read.format(g.fmt)
        if g.fmt == "csv":
            schema = T.StructType([T.StructField(c, T.StringType(), True) for c in g.header])
            reader = reader.schema(schema).option("header", True).option("escape", '"')
        raw = reader.load(remote)
        cols = [c for c in raw.columns if c in COLUMNS]
        dfs = [
            raw.select(
                *[F.col(f"`{c}`") for c in cols],
                F.lit(0).alias("_file"),
                F.col("_metadata.file_path").alias("_path"),
                F.col("_metadata.file_block_start").alias("_blk"),
                F.monotonically_increasing_id().alias("_mid"),
            )
        ]
    # column checks, in file order, before any data is read
    order = sorted(
        ((i, gi) for gi, g in enumerate(groups) for i, _ in g.files), key=lambda x: x[0]
    )
    optional_first: dict[str, int] = {}
    for i, gi in order:
        present = [c for c in dfs[gi].columns if c in COLUMNS]
        for req in REQUIRED_COLUMNS:
            if req not in present:
                rule = next(r for r in RULES if r.name == f"{req}.missing_column")
                raise TraceError(
                    f"{rule.description} (columns present: {sorted(present)})",
                    column=req,
                    path=path_of[i],
                )
        for opt in ("partition", "publish_time"):
            if opt in present:
                optional_first.setdefault(opt, i)
    for opt, first in optional_first.items():
        for i, gi in order:
            if opt not in dfs[gi].columns:
                raise TraceError(
                    f"optional column present in {path_of[first]!r} but missing here",
                    column=opt,
                    path=path_of[i],
                )
    key_kind = _csv_key_kinds(spark, groups, dfs)
    parsed = [
        _parse_group(df, g, key_kind, require_causal, path_of)
        for g, df in zip(groups, dfs, strict=True)
    ]

    # one pass: per (file, block) row counts and per-rule counts
    rule_names = [r.name for r in RULES]
    stats: list[_BlockStats] = []
    for pr in parsed:
        bad = [F.col(f"_bad_{i}") for i in range(len(pr.rules))]
        aggs = [F.count(F.lit(1)).alias("rows"), F.min("_mid").alias("mid0")]
        aggs += [F.sum(b.cast("long")).alias(f"c{i}") for i, b in enumerate(bad)]
        aggs.append(F.sum(_any(bad).cast("long")).alias("bad"))
        key_cols = ["_file", "_blk"] + (["_path"] if remote is not None else [])
        for r in pr.df.groupBy(*key_cols).agg(*aggs).collect():
            counts = {pr.rules[i].name: int(r[f"c{i}"] or 0) for i in range(len(pr.rules))}
            stats.append(
                (
                    int(r["_file"]),
                    str(r["_path"]) if remote is not None else "",
                    int(r["_blk"]),
                    int(r["rows"]),
                    int(r["mid0"]),
                    counts,
                    int(r["bad"] or 0),
                )
            )
    stats.sort(key=lambda x: (x[0], x[1], x[2]))
    rows_read = sum(s[3] for s in stats)
    if rows_read == 0 and not allow_empty:
        where = path_of[0] if len(path_of) == 1 else str(Path(path_of[0]).parent)
        raise TraceError("the trace has no rows (only a header, or empty files)", path=where)
    # row offsets: per file, per block
    file_offset: dict[tuple[int, str], int] = {}
    block_offset: dict[tuple[int, str, int], tuple[int, int]] = {}
    acc = 0
    for f, fp, blk, n, mid0, _, _ in stats:
        file_offset.setdefault((f, fp), acc)
        block_offset[(f, fp, blk)] = (acc, mid0)
        acc += n
    totals = {name: 0 for name in rule_names}
    for s in stats:
        for name, c in s[5].items():
            totals[name] += c
    total_bad = sum(s[6] for s in stats)

    final = _final_frames(parsed)
    report = BadRowReport(rows_read=rows_read)
    if total_bad == 0:
        return final(False), report

    def locate(r: Any) -> tuple[int, int, str]:
        f = int(r["_file"])
        fp = str(r["_path"]) if remote is not None else ""
        start, mid0 = block_offset[(f, fp, int(r["_blk"]))]
        row = start + int(r["_mid"]) - mid0
        file_row = row - file_offset[(f, fp)]
        return row, file_row, (fp.removeprefix("file:") if remote is not None else path_of[f])

    if on_bad_rows == "fail":
        best: tuple[tuple[int, int, int], Any, _Parsed] | None = None
        for pr in parsed:
            any_bad = _any([F.col(f"_bad_{i}") for i in range(len(pr.rules))])
            key_cols = ["_file"] + (["_path"] if remote is not None else []) + ["_blk", "_mid"]
            got = pr.df.where(any_bad).orderBy(*key_cols).limit(1).collect()
            if got:
                r = got[0]
                row, _, _ = locate(r)
                if best is None or row < best[0][0]:
                    best = ((row, 0, 0), r, pr)
        assert best is not None
        _, r, pr = best
        row, file_row, where = locate(r)
        rule = next(pr.rules[i] for i in range(len(pr.rules)) if r[f"_bad_{i}"])
        if rule.kind == "not_causal":
            detail = (
                f"{rule.description} (got arrival_time={r['arrival_time']} < "
                f"event_time={r['event_time']})"
            )
        else:
            detail = f"{rule.description} (got {r[f'_raw_{rule.column}']!r})"
        raise TraceError(detail, row=row, column=rule.column, path=where, file_row=file_row)

    report.total = total_bad
    report.counts = {n: c for n, c in totals.items() if c}
    for pr in parsed:
        exploded = pr.df.where(_any([F.col(f"_bad_{i}") for i in range(len(pr.rules))])).select(
            "*",
            F.explode(
                F.array(*[F.when(F.col(f"_bad_{i}"), F.lit(i)) for i in range(len(pr.rules))])
            ).alias("_rule"),
        ).where(F.col("_rule").isNotNull())
        key_cols = ["_file"] + (["_path"] if remote is not None else []) + ["_blk", "_mid"]
        w = Window.partitionBy("_rule").orderBy(*key_cols)
        top = exploded.withColumn("_n", F.row_number().over(w)).where(F.col("_n") <= _MAX_EXAMPLES)
        for r in top.collect():
            rule = pr.rules[int(r["_rule"])]
            row, _, _ = locate(r)
            report.examples.setdefault(rule.name, []).append(
                (row, rule.column, r[f"_raw_{rule.column}"])
            )
    report.examples = {
        r.name: sorted(report.examples[r.name], key=lambda x: x[0])[:_MAX_EXAMPLES]
        for r in RULES
        if r.name in report.examples
    }
    return final(True), report


def _final_frames(parsed: list[_Parsed]) -> Any:
    """A function returning the validated trace DataFrame (bad rows removed or not)."""
    any_str = False
    for pr in parsed:
        t = pr.df.schema["key"].dataType if "key" in pr.columns else T.LongType()
        any_str = any_str or isinstance(t, T.StringType)
    has = {c: all(c in pr.columns for pr in parsed) for c in ("partition", "publish_time")}

    def build(drop_bad: bool) -> DataFrame:
        frames = []
        for pr in parsed:
            df = pr.df
            if drop_bad and pr.rules:
                df = df.where(~_any([F.col(f"_bad_{i}") for i in range(len(pr.rules))]))
            key = F.col("key") if "key" in pr.columns else F.lit(0).cast("long")
            if any_str:
                key = key.cast("string")
            elif "key" in pr.columns:
                key = key.cast("long")
            cols = [
                F.col("event_time").cast("long").alias("event_time"),
                F.col("arrival_time").cast("long").alias("arrival_time"),
                key.alias("key"),
                (F.col("value") if "value" in pr.columns else F.lit(1.0))
                .cast("double")
                .alias("value"),
            ]
            for c in ("partition", "publish_time"):
                if has[c]:
                    cols.append(F.col(c).cast("long").alias(c))
            frames.append(df.select(*cols))
        out = frames[0]
        for f in frames[1:]:
            out = out.unionByName(f)
        return out

    return build
