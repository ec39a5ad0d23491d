"""Where a streaming run's sources stand between micro-batches: what a checkpoint saves
so that a restart reads on from there.

A :class:`Position` holds the next batch's number and, per source label, a position of
that source's own kind, in values the checkpoint's codec holds (:mod:`.codec`: ints,
strings, bytes, tuples, ...): for a TestStream, the index of its next event and the turns
it had. An unbounded splittable DoFn's position (its residual restrictions, with their
watermark estimators' states, as bytes its coders wrote) is kept as its step's summaries.
The driver's schedule starts from a Position and gives each batch the Position after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Position"]


@dataclass(frozen=True)
class Position:
    """The sources after a batch: ``number`` is the next batch's number, ``sources`` each
    source's position (by label), ``finished`` whether the run's last batch (every source
    at ``MAX_TIMESTAMP``) has run. The start of a run is ``Position(0, {})``."""

    number: int
    sources: Mapping[str, Any] = field(default_factory=dict)
    finished: bool = False
