"""Strategy specs Spark computes: ``perfect``, ``perfect:oracle``, ``bounded:<duration>``,
``percentile:<p>`` and ``percentile:<p>:hold``, parsed by theory's grammar so a spec
means the same on both paths."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from theory.watermarks.spec import make_source_watermark

__all__ = ["Strategy", "parse_strategies", "parse_strategy"]


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


def parse_strategies(specs: Sequence[str | Strategy]) -> tuple[Strategy, ...]:
    """Every spec parsed (:func:`parse_strategy`); ``ValueError`` for none or for a
    repeated name, since names key the results."""
    if isinstance(specs, str):
        raise TypeError(f"strategies must be a sequence of specs, not one string: {specs!r}")
    parsed = tuple(parse_strategy(s) for s in specs)
    if not parsed:
        raise ValueError("no strategies given")
    names = [s.name for s in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"strategy names must be unique, got {names}")
    return parsed
