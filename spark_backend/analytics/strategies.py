"""Strategy specs, parsed by theory's grammar so a spec means the same on every path:
both engines run every source watermark a comparison can run (:func:`parse_strategies`).

On Spark, :func:`bucket_spec` says how: ``perfect``, ``perfect:oracle``, ``static`` (equal
to ``perfect``), ``bounded:<d>``, ``flink-bounded:<d>`` and ``percentile:<p>[:hold]`` in
the parallel scan over arrival-time buckets; ``dynamic[:idle=<d>]`` and
``flink-bounded:<d>:idle=<t>`` (:func:`is_sequential`: each partition's state meets the
others' at every step, and idleness depends on the whole past) in one pass over the
whole trace in one task (:mod:`spark_backend.analytics.sequential`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from theory.watermarks.spec import make_source_watermark

__all__ = [
    "NOT_COMPARED", "SPARK_KINDS", "Strategy", "bucket_spec", "is_sequential", "parse_any",
    "parse_strategies", "parse_strategy",
]


@dataclass(frozen=True)
class Strategy:
    """A parsed strategy spec: ``kind`` is a kind of
    :class:`theory.watermarks.spec.SourceWatermarkSpec` (perfect, oracle, static,
    bounded, flink-bounded, dynamic, percentile).

    ``bound`` is µs (bounded, flink-bounded); ``idle_timeout`` µs or None (flink-bounded,
    dynamic); ``p`` and ``fallback`` (``"perfect"`` or ``"hold"``) are the percentile's.
    :func:`bucket_spec` of it is a :class:`theory.watermarks.bucket_curves.CurveSpec`.
    """

    name: str
    kind: str
    bound: int = 0
    p: float = 1.0
    fallback: str = "perfect"
    idle_timeout: int | None = None

    @property
    def hold(self) -> bool:
        """A percentile without fallback: it holds while the backlog is empty."""
        return self.fallback == "hold"


def parse_strategy(spec: str | Strategy) -> Strategy:
    """``perfect``, ``perfect:oracle`` (uncapped, research only), ``bounded:<duration>``
    (``10s``, ``2m``, µs), ``percentile:<p>`` or
    ``percentile:<p>:hold`` (no fallback: the watermark holds while the backlog is empty):
    the specs of :func:`theory.watermarks.spec.make_source_watermark` that Spark
    computes, parsed by it. ``TypeError`` for a spec that is neither a string nor a
    :class:`Strategy`; ``ValueError`` names a bad spec.
    """
    if isinstance(spec, Strategy):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str or a Strategy, got {spec!r}")
    parsed = make_source_watermark(spec)  # the spec's own errors
    text = spec.strip()
    if parsed.kind in ("perfect", "oracle"):
        return Strategy(text, parsed.kind)
    if parsed.kind == "bounded" and parsed.bound is not None:
        return Strategy(text, "bounded", bound=parsed.bound)  # checked by the parser
    if parsed.kind == "percentile" and parsed.p is not None:
        fallback = "hold" if parsed.hold else "perfect"
        return Strategy(text, "percentile", p=parsed.p, fallback=fallback)
    raise ValueError(
        f"bad strategy {spec!r}: Spark computes 'perfect', 'perfect:oracle', "
        "'bounded:<duration>' and 'percentile:<p>[:hold]' only"
    )


#: The kinds the local engine computes with the bucket kernel on one bucket
#: (:mod:`theory.watermarks.bucket_curves`); the others with theory's generators.
SPARK_KINDS = ("perfect", "oracle", "bounded", "percentile")

#: The specs no comparison of a trace's event times runs, and why.
NOT_COMPARED = {"ingress": "it re-stamps every event time with its arrival time"}


def parse_any(spec: str | Strategy) -> Strategy:
    """Any source-watermark spec of :func:`theory.watermarks.spec.make_source_watermark`
    (the one grammar of ``analyze``, ``demo`` and ``simulate``) as a :class:`Strategy`:
    the Spark kinds as :func:`parse_strategy` gives them, the others with their kind
    (and bound). ``ValueError`` names a bad spec, or one no comparison runs."""
    if isinstance(spec, Strategy):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str or a Strategy, got {spec!r}")
    parsed = make_source_watermark(spec)
    if parsed.kind in SPARK_KINDS:
        return parse_strategy(spec)
    if parsed.kind in NOT_COMPARED:
        why = NOT_COMPARED[parsed.kind]
        raise ValueError(f"strategy {spec.strip()!r} cannot be compared: {why}")
    return Strategy(
        spec.strip(), parsed.kind, bound=parsed.bound or 0, idle_timeout=parsed.idle_timeout
    )


def is_sequential(s: Strategy) -> bool:
    """Whether Spark computes ``s`` in one pass over the whole trace (``dynamic``,
    ``dynamic:idle=<d>``, ``flink-bounded:<d>:idle=<t>``) rather than per bucket."""
    return s.kind == "dynamic" or (s.kind == "flink-bounded" and s.idle_timeout is not None)


def bucket_spec(s: Strategy) -> Strategy:
    """What the bucket kernel computes for ``s`` (not :func:`is_sequential`): ``static``
    as ``perfect`` (docs/semantics.md: the least unread event time over a static set of
    partitions is the perfect watermark), the others as they are."""
    if is_sequential(s):
        raise ValueError(f"strategy {s.name!r} is computed in one pass, not per bucket")
    return Strategy(s.name, "perfect") if s.kind == "static" else s


def parse_strategies(
    specs: Sequence[str | Strategy], engine: str = "spark"
) -> tuple[Strategy, ...]:
    """Every spec parsed (:func:`parse_any`); both engines (``spark``, ``local``) run
    every one. ``ValueError`` for none, for a repeated name (names key the results), or
    a bad engine."""
    if isinstance(specs, str):
        raise TypeError(f"strategies must be a sequence of specs, not one string: {specs!r}")
    if engine not in ("spark", "local"):
        raise ValueError(f"engine must be 'spark' or 'local', got {engine!r}")
    parsed = tuple(parse_any(s) for s in specs)
    if not parsed:
        raise ValueError("no strategies given")
    names = [s.name for s in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"strategy names must be unique, got {names}")
    return parsed
