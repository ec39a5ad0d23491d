"""Seeded trace generators on Spark: the twins of :mod:`theory.data.generators`.

Each takes the same spec as its numpy twin (:class:`~theory.data.specs.TraceSpec`,
:class:`~theory.data.specs.SessionSpec`: same parameters, checks and distributions) and
builds the rows with ``spark.range``; every random draw is a counter-based hash of
``(seed, row, stream)`` (:mod:`spark_backend.traces.draws`; a row is its id, or a session
and a place in it), so a trace does not depend on how Spark partitions it. Event times
are prefix sums of integer µs gaps, computed as a parallel scan
(:mod:`spark_backend.traces.scan`). The random stream is not numpy's, so rows differ
from the numpy generators' while their distributions agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_backend.traces.draws import (
    check_supported,
    delay_us,
    draw,
    plus_capped,
    poisson,
    uniform,
)
from spark_backend.traces.scan import prefix_sums, slices
from theory.columns import check_count
from theory.data.distributions import Delay
from theory.data.specs import SessionSpec, TraceSpec
from theory.time import MICROS_PER_SECOND

__all__ = ["chapter3_trace_df", "game_sessions_df", "generate_trace_df"]

# The random streams, one per use of randomness (sessions move no keys, so their scores
# take the stream keys move with).
_GAP, _KEY, _MOVE, _DELAY, _DELAY2, _STRAGGLER, _EXTRA, _EXTRA2 = range(8)
_VALUE, _VALUE2, _LENGTH = 8, 9, 10
_SCORE = _MOVE


def _seconds_to_us(seconds: Column) -> Column:
    return F.rint(seconds * F.lit(float(MICROS_PER_SECOND))).cast("long")


def _delays(seed: int, delay: Delay, stragglers: float, straggler_delay: Delay) -> Column:
    """A row's delay (µs), plus a straggler delay for a ``stragglers`` fraction of rows."""
    idc = F.col("id")
    d = delay_us(delay, uniform(seed, _DELAY, idc), uniform(seed, _DELAY2, idc))
    if stragglers <= 0:
        return d
    extra = delay_us(straggler_delay, uniform(seed, _EXTRA, idc), uniform(seed, _EXTRA2, idc))
    return F.when(uniform(seed, _STRAGGLER, idc) < F.lit(float(stragglers)), d + extra).otherwise(d)


# --------------------------------------------------------------------------- generate_trace


def generate_trace_df(
    spark: SparkSession, n: int, *, seed: int, num_partitions: int | None = None, **params: Any
) -> DataFrame:
    """The Spark twin of :func:`theory.data.generators.generate_trace`: ``n`` rows of the
    trace :class:`~theory.data.specs.TraceSpec` ``(n, seed, **params)`` describes.

    Distributions (delays, ``value``) must be among
    :data:`~spark_backend.traces.draws.SUPPORTED_DISTRIBUTIONS`. ``num_partitions`` spreads
    the rows (the trace does not depend on it). The DataFrame is lazy apart from the first
    pass of the event-time scan, which runs here.
    """
    spec = TraceSpec(n, seed, **params)
    for name in ("delay", "straggler_delay", "value"):
        check_supported(getattr(spec, name), name)
    ids = spark.range(0, spec.n, 1, slices(spark, spec.n, num_partitions))
    gaps = ids.select("id", F.spark_partition_id().alias("_pid"), _gap_us(spec).alias("gap"))
    times, _ = prefix_sums(gaps, "gap", "event_time", spec.start, keep=["id"])
    return _trace_rows(times, spec)


def _gap_us(spec: TraceSpec) -> Column:
    """Exponential gaps at ``rate`` (µs), divided by ``burst_factor`` inside bursts."""
    gap = -F.log(uniform(spec.seed, _GAP, F.col("id"))) / F.lit(spec.rate)
    if spec.bursts and spec.n:
        gap = F.when(_in_burst(spec), gap / F.lit(spec.burst_factor)).otherwise(gap)
    return _seconds_to_us(gap)


def _in_burst(spec: TraceSpec) -> Column:
    """Rows in one of ``bursts`` runs of ``burst_run`` rows at seeded positions."""
    run = spec.burst_run
    starts = np.random.default_rng([spec.seed, 1]).integers(
        0, max(1, spec.n - run + 1), spec.bursts
    )
    idc = F.col("id")
    hit = F.lit(False)
    for s in sorted(int(x) for x in starts):
        hit = hit | ((idc >= F.lit(s)) & (idc < F.lit(s + run)))
    return hit


def _trace_rows(times: DataFrame, spec: TraceSpec) -> DataFrame:
    """Keys, delays and values of each row, from its id and event time."""
    idc = F.col("id")
    key = F.floor(uniform(spec.seed, _KEY, idc) * F.lit(spec.keys)).cast("long")
    key = _move_idle_keys(key, F.col("event_time"), uniform(spec.seed, _MOVE, idc), spec)
    delay = _delays(spec.seed, spec.delay, spec.stragglers, spec.straggler_delay)
    value = F.lit(1.0)
    if spec.value is not None:
        u1, u2 = uniform(spec.seed, _VALUE, idc), uniform(spec.seed, _VALUE2, idc)
        value = draw(spec.value, u1, u2)
    df = times.select("event_time", key.alias("key"), delay.alias("_delay"), value.alias("value"))
    named = F.col("key")
    if spec.key_prefix is not None:
        named = F.concat(F.lit(spec.key_prefix), F.col("key").cast("string"))
    return df.select(
        "event_time",
        plus_capped(F.col("event_time"), F.col("_delay")).alias("arrival_time"),
        named.alias("key"),
        "value",
        (F.col("key") % F.lit(spec.partitions)).alias("partition"),
    )


def _move_idle_keys(key: Column, event_time: Column, u: Column, spec: TraceSpec) -> Column:
    """Keys of idle partitions during the idle interval move to a key of an active
    partition (same ``key // partitions``, a uniformly chosen active residue; one step
    down if that key does not exist)."""
    if not spec.idle_partitions or spec.idle_interval is None:
        return key
    residues = spec.active_residues  # not empty: the spec checks it
    parts = F.lit(spec.partitions)
    r = F.element_at(
        F.array(*[F.lit(x).cast("long") for x in residues]),
        (F.floor(u * F.lit(len(residues))) + F.lit(1)).cast("int"),
    )
    moved = (key - key % parts) + r
    moved = F.when(moved >= F.lit(spec.keys), moved - parts).otherwise(moved)
    lo, hi = spec.idle_interval
    hit = (
        (event_time >= F.lit(lo))
        & (event_time < F.lit(hi))
        & (key % parts).isin(*spec.idle_partitions)
    )
    return F.when(hit, moved).otherwise(key)


# --------------------------------------------------------------------------- game sessions


def game_sessions_df(
    spark: SparkSession, n: int, *, seed: int, num_partitions: int | None = None, **params: Any
) -> DataFrame:
    """The Spark twin of :func:`theory.data.generators.game_sessions_trace`: ``n`` rows of
    the trace :class:`~theory.data.specs.SessionSpec` ``(n, seed, **params)`` describes.

    Sessions (1 + Poisson(events_per_session - 1) events each, as in numpy) go to users
    in turn (session ``s`` to user ``first_user + s % users``) and are cut to exactly
    ``n`` events. Runs one Spark job here (the first pass of the event-time scan); the
    DataFrame is lazy.
    """
    spec = SessionSpec(n, seed, **params)
    profile = spec.profile
    check_supported(profile.delay, "delay")
    check_supported(profile.straggler_delay, "straggler_delay")
    parts = slices(spark, spec.n, num_partitions)
    sessions = int(spec.n / spec.events_per_session * 1.1) + 16
    while True:
        events = _session_events(spark, spec, sessions, parts)
        times, rows = prefix_sums(
            events, "gap", "event_time", spec.start, ["_user"], "_user", spec.users, index="id"
        )
        if rows >= spec.n:
            return _session_rows(times.where(F.col("id") < F.lit(spec.n)), spec)
        sessions *= 2  # lengths depend on the session alone: more sessions extend the same


def _session_events(spark: SparkSession, spec: SessionSpec, sessions: int, parts: int) -> DataFrame:
    """Every event of sessions ``0 .. sessions-1`` in order: its session ``_s``, its place
    ``_j`` in it, its user ``_user`` (``_s % users``), ``_pid`` and the ``gap`` before it
    (µs). Draws are keyed by ``(_s, _j)``, so they do not depend on the partitioning."""
    drawn = spark.range(0, sessions, 1, parts).select(
        F.col("id").alias("_s"), uniform(spec.seed, _LENGTH, F.col("id")).alias("_u")
    )
    last = poisson(spec.poisson_mean, "_u").cast("long")  # a session has 1 + Poisson events
    events = drawn.select("_s", F.explode(F.sequence(F.lit(0).cast("long"), last)).alias("_j"))
    return events.select(
        "_s",
        "_j",
        (F.col("_s") % F.lit(spec.users)).alias("_user"),
        F.spark_partition_id().alias("_pid"),
        _session_gap_us(spec).alias("gap"),
    )


def _session_gap_us(spec: SessionSpec) -> Column:
    """The gap (µs) before each event: exponential inside a session, capped; before a
    user's first session uniform; before a later session ``min_between_gap`` + exponential."""
    u = uniform(spec.seed, _GAP, F.col("_s"), F.col("_j"))
    within = F.least(-F.log(u) * F.lit(spec.within_gap), F.lit(spec.max_within_gap))
    between = F.when(F.col("_s") < F.lit(spec.users), u * F.lit(spec.between_gap)).otherwise(
        F.lit(spec.min_between_gap) - F.log(u) * F.lit(spec.between_gap)
    )
    return _seconds_to_us(F.when(F.col("_j") == 0, between).otherwise(within))


def _session_rows(times: DataFrame, spec: SessionSpec) -> DataFrame:
    """Users, scores and delays of each event; idle users' events paused."""
    idc = F.col("id")
    user = F.col("_user") + F.lit(spec.first_user)
    et = F.col("event_time")
    if spec.idle_partitions and spec.idle_interval is not None:
        lo, hi = spec.idle_interval
        paused = (user % F.lit(spec.partitions)).isin(*spec.idle_partitions) & (et >= F.lit(lo))
        et = F.when(paused, plus_capped(et, F.lit(hi - lo))).otherwise(et)
    p = spec.profile
    delay = _delays(spec.seed, p.delay, p.stragglers, p.straggler_delay)
    score = F.lit(1.0) + F.floor(uniform(spec.seed, _SCORE, idc) * F.lit(100.0))
    df = times.select(
        et.alias("event_time"), delay.alias("_delay"), user.alias("key"), score.alias("value")
    )
    return df.select(
        "event_time",
        plus_capped(F.col("event_time"), F.col("_delay")).alias("arrival_time"),
        "key",
        "value",
        (F.col("key") % F.lit(spec.partitions)).alias("partition"),
    )


# --------------------------------------------------------------------------- chapter 3


def chapter3_trace_df(
    spark: SparkSession,
    events: int,
    *,
    seed: int = 0,
    users: int = 100,
    partitions: int = 4,
    idle_partitions: tuple[int, ...] = (3,),
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
    span = SessionSpec(max(events - half, 1), seed, users=users).expected_span
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
