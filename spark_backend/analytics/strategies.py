"""Strategy specs, parsed by theory's grammar so a spec means the same on every path:
Spark computes ``perfect``, ``perfect:oracle``, ``bounded:<duration>``, ``percentile:<p>``
and ``percentile:<p>:hold``; the local engine every source watermark
(:func:`parse_strategies`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from theory.watermarks.spec import make_source_watermark

__all__ = [
    "NOT_COMPARED", "SPARK_KINDS", "Strategy", "parse_any", "parse_strategies", "parse_strategy",
]


@dataclass(frozen=True)
class Strategy:
    """A parsed strategy spec: ``kind`` is perfect, oracle, bounded or percentile.

    ``bound`` is µs (bounded); ``p`` and ``fallback`` (``"perfect"`` or ``"hold"``) are
    the percentile's. It is a :class:`theory.watermarks.bucket_curves.CurveSpec`.
    """

    name: str
    kind: str
    bound: int = 0
    p: float = 1.0
    fallback: str = "perfect"

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


#: The kinds Spark's bucketed curves compute (:mod:`theory.watermarks.bucket_curves`).
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
    return Strategy(spec.strip(), parsed.kind, bound=parsed.bound or 0)


def parse_strategies(
    specs: Sequence[str | Strategy], engine: str = "spark"
) -> tuple[Strategy, ...]:
    """Every spec parsed (:func:`parse_any`) for ``engine``: ``spark`` computes the
    :data:`SPARK_KINDS` only (:func:`parse_strategy`), ``local`` every spec.
    ``ValueError`` for none, for a repeated name (names key the results), or for a
    strategy the engine cannot run (naming it and the engine that can)."""
    if isinstance(specs, str):
        raise TypeError(f"strategies must be a sequence of specs, not one string: {specs!r}")
    parsed = tuple(parse_any(s) for s in specs)
    if engine == "spark":
        for s in parsed:
            if s.kind not in SPARK_KINDS:
                raise ValueError(
                    f"strategy {s.name!r} cannot run on --engine spark, which computes "
                    "perfect, perfect:oracle, bounded:<duration> and percentile:<p>[:hold]; "
                    "--engine local runs every source watermark"
                )
    if not parsed:
        raise ValueError("no strategies given")
    names = [s.name for s in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"strategy names must be unique, got {names}")
    return parsed
