"""Column tables as HTML: what a notebook shows for the experiments' results
(``_repr_html_``)."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

__all__ = ["html_cell", "html_table"]


def html_cell(value: object) -> str:
    """A cell's text: floats to 6 significant digits, NaN and None as "–", anything
    else as ``str``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def html_table(table: Mapping[str, Sequence[object]], caption: str = "") -> str:
    """``table`` (column name -> values, all of one length) as an HTML ``<table>``, one
    row per index, text escaped. ValueError if the columns differ in length."""
    lengths = {len(v) for v in table.values()}
    if len(lengths) > 1:
        raise ValueError(f"columns have different lengths {sorted(lengths)}")
    n = lengths.pop() if lengths else 0
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table)
    rows = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(html_cell(v[i]))}</td>" for v in table.values())
        + "</tr>"
        for i in range(n)
    )
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
