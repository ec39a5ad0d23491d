"""Readable observability of a streaming run: the watermark table and why a watermark waits.

:class:`WatermarkTable` is what ``result.watermarks()`` returns: a mapping of transform
label -> ``{"input", "output", hold...}`` step series (raw µs, as before), shown as a
table of each transform's watermarks and holds at the end of the run (or
:meth:`WatermarkTable.at` a processing time), times in ISO-8601 UTC and ``-∞``/``+∞`` for
the bounds: ``print(table)`` gives plain text, a notebook shows ``_repr_html_``.

:class:`Why` is what ``result.why(label, at)`` returns: the (transform, component) chain
as before, with the late elements each GroupByKey on it dropped so far
(``droppedDueToLateness``). :func:`resolve_label` takes a leaf or a composite label (e.g.
``"Fixed/CombinePerKey(sum)"``) to the leaf transform whose output watermark is the
composite's; an unknown label raises ``KeyError`` naming the close ones.
"""

from __future__ import annotations

import difflib
import html
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from apache_beam.portability.api import beam_runner_api_pb2 as pb

from spark_backend.runner.streaming.watermarks import INPUT, OUTPUT, leaf_transforms
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, format_timestamp

__all__ = ["WatermarkTable", "Why", "composite_leaves", "resolve_label", "show_time"]


def show_time(micros: int) -> str:
    """A watermark (µs) for people: ISO-8601 UTC, ``-∞`` and ``+∞`` for the bounds."""
    if micros <= MIN_TIMESTAMP:
        return "-∞"
    if micros >= MAX_TIMESTAMP:
        return "+∞"
    return format_timestamp(micros)


def composite_leaves(pipeline: pb.Pipeline) -> dict[str, tuple[str, ...]]:
    """Each composite transform's label -> the leaf labels under it that run, in the
    pipeline's order."""
    transforms = pipeline.components.transforms
    order = {t.unique_name: i for i, t in enumerate(leaf_transforms(pipeline))}
    out: dict[str, tuple[str, ...]] = {}

    def walk(transform_id: str) -> list[str]:
        t = transforms[transform_id]
        if not t.subtransforms:
            return [t.unique_name] if t.unique_name in order else []
        leaves = [leaf for sub in t.subtransforms for leaf in walk(sub)]
        if t.unique_name:
            out[t.unique_name] = tuple(sorted(set(leaves), key=order.__getitem__))
        return leaves

    for root in pipeline.root_transform_ids:
        walk(root)
    return out


def resolve_label(
    label: str,
    leaves: Sequence[str],
    composites: Mapping[str, tuple[str, ...]],
    output_at: Any,
) -> str:
    """``label`` if it is a leaf; for a composite, the leaf under it whose output
    watermark (``output_at(leaf)``, µs) is lowest, the last in pipeline order on a tie
    (downstream, where the composite's output comes from). ``KeyError`` names the close
    labels when ``label`` is neither."""
    if label in leaves:
        return label
    under = [leaf for leaf in composites.get(label, ()) if leaf in leaves]
    if under:
        return min(reversed(under), key=output_at)
    names = [*leaves, *(c for c, ls in composites.items() if ls)]
    close = difflib.get_close_matches(label, names, n=5, cutoff=0.4)
    if not close:
        close = [n for n in names if label.lower() in n.lower()][:5]
    hint = f"; close: {', '.join(repr(c) for c in close)}" if close else ""
    raise KeyError(f"no transform labelled {label!r} in the pipeline{hint}")


class Why(list[tuple[str, str]]):
    """The (transform, component) chain holding a watermark, with ``dropped``: the late
    elements each grouping step on the chain dropped so far (``droppedDueToLateness``)."""

    def __init__(self, chain: Sequence[tuple[str, str]], dropped: Mapping[str, int]) -> None:
        super().__init__(chain)
        self.dropped = dict(dropped)

    def __str__(self) -> str:
        lines = [f"{label}: {component}" for label, component in self]
        lines += [f"{step}: droppedDueToLateness {n}" for step, n in self.dropped.items()]
        return "\n".join(lines)


class WatermarkTable(Mapping[str, dict[str, StepSeries]]):
    """Transform label -> its watermark series (µs), shown as a table (module docstring)."""

    def __init__(self, series: Mapping[str, dict[str, StepSeries]], at: int | None = None) -> None:
        self._series = dict(series)
        self._at = at

    def __getitem__(self, label: str) -> dict[str, StepSeries]:
        return self._series[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self._series)

    def __len__(self) -> int:
        return len(self._series)

    def at(self, processing_time: int) -> WatermarkTable:
        """The same series, shown at ``processing_time`` (µs) instead of the end."""
        return WatermarkTable(self._series, int(processing_time))

    def rows(self) -> list[tuple[str, int, int, dict[str, int]]]:
        """Per transform: label, input and output watermark and the holds set (µs), at
        the table's time (the end of the run unless :meth:`at` chose one)."""
        out = []
        for label, series in self._series.items():
            values = {name: self._value(s) for name, s in series.items()}
            holds = {
                name: v
                for name, v in values.items()
                if name not in (INPUT, OUTPUT) and v != MAX_TIMESTAMP
            }
            out.append((label, values[INPUT], values[OUTPUT], holds))
        return out

    def _value(self, series: StepSeries) -> int:
        if self._at is None:
            return int(series.values[-1]) if series.values.size else int(series.initial)
        return int(series.at(np.asarray([self._at], np.int64))[0])

    def _cells(self) -> list[tuple[str, str, str, str]]:
        return [
            (
                label,
                show_time(i),
                show_time(o),
                ", ".join(f"{n} {show_time(v)}" for n, v in holds.items()),
            )
            for label, i, o, holds in self.rows()
        ]

    def _title(self) -> str:
        when = "at the end" if self._at is None else f"at processing time {self._at} µs"
        return f"watermarks {when}"

    def __str__(self) -> str:
        header = ("transform", "input", "output", "holds")
        cells = [header, *self._cells()]
        widths = [max(len(row[c]) for row in cells) for c in range(4)]
        lines = [self._title()]
        for row in cells:
            lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("transform", "input", "output", "holds"))
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
            for row in self._cells()
        )
        caption = html.escape(self._title())
        return f"<table><caption>{caption}</caption><tr>{head}</tr>{body}</table>"
