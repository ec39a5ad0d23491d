"""The report: an ``index.html`` with figures (PNG) and tables (CSV and HTML), and data
tables beside it (Parquet).

A :class:`Report` collects sections in order and is written in one go with
:meth:`Report.write`, atomically: to a temporary directory that then replaces the target.
Each section names the trace it is about (:meth:`Report.trace`), and wide tables scroll
sideways within the page.
"""

from __future__ import annotations

import csv
import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_backend.cli.atomic import atomic_directory
from spark_backend.report.tables import csv_value

Table = Mapping[str, Sequence[object]]


def record_columns(
    rows: Sequence[Any], spec: Mapping[str, str | Callable[[Any], object]]
) -> dict[str, list[object]]:
    """A table of records: for each header, every row's attribute of that name (a ``str``
    in ``spec``) or the value of the callable on the row."""
    return {
        header: [getattr(r, how) if isinstance(how, str) else how(r) for r in rows]
        for header, how in spec.items()
    }


@dataclass
class _Section:
    kind: str
    title: str
    body: Any
    caption: str = ""
    trace: str = ""


@dataclass
class Report:
    """An ordered list of text, table and figure sections."""

    title: str
    sections: list[_Section] = field(default_factory=list)
    #: What the sections added next are about (:meth:`trace`).
    about: str = ""

    def trace(self, description: str) -> None:
        """The sections added after this are about ``description``, a sentence naming
        the trace (e.g. "On the demo's trace: ..."): each shows it under its heading."""
        self.about = description

    def _add(self, section: _Section) -> None:
        section.trace = self.about
        self.sections.append(section)

    def text(self, title: str, paragraph: str) -> None:
        """A heading and a paragraph of plain text."""
        self._add(_Section("text", title, paragraph))

    def table(
        self,
        name: str,
        title: str,
        table: Table,
        caption: str = "",
        formats: Mapping[str, Callable[[object], str]] | None = None,
        show_rows: int | None = None,
        show_columns: Sequence[str] | None = None,
    ) -> None:
        """A table, shown in the page (its first ``show_rows`` rows and its
        ``show_columns`` when given) and written whole as ``<name>.csv``."""
        lengths = {len(v) for v in table.values()}
        if len(lengths) > 1:
            raise ValueError(f"table {name!r}: columns have different lengths {sorted(lengths)}")
        shown = table if show_columns is None else {c: table[c] for c in show_columns}
        self._add(
            _Section("table", title, (name, table, formats or {}, show_rows, shown), caption)
        )

    def data(self, name: str, table: pa.Table) -> None:
        """A table written as ``<name>.parquet`` beside the page (not shown in it)."""
        self._add(_Section("data", name, table))

    def figure(
        self, title: str, draw: Callable[[Path], Path], filename: str, caption: str = ""
    ) -> None:
        """A figure drawn at write time by ``draw(path)`` into ``<filename>``."""
        self._add(_Section("figure", title, (filename, draw), caption))

    def write(self, out: str | Path) -> Path:
        """Write everything under ``out`` atomically; returns the path of index.html."""
        target = Path(out)
        with atomic_directory(target) as tmp:
            parts = [_HEAD.format(title=html.escape(self.title))]
            for s in self.sections:
                if s.kind == "data":
                    pq.write_table(s.body, tmp / f"{s.title}.parquet")
                    continue
                parts.append(f"<section><h2>{html.escape(s.title)}</h2>")
                if s.trace:
                    parts.append(f'<p class="trace">{html.escape(s.trace)}</p>')
                if s.kind == "text":
                    parts.append(f"<p>{html.escape(str(s.body))}</p>")
                elif s.kind == "table":
                    name, table, formats, show_rows, shown = s.body
                    write_csv(tmp / f"{name}.csv", table)
                    head = (
                        shown
                        if show_rows is None
                        else {c: list(v)[:show_rows] for c, v in shown.items()}
                    )
                    parts.append(_html_table(head, formats))
                    parts.append(
                        f'<p class="cap">{html.escape(s.caption)} '
                        f'<a href="{name}.csv">{name}.csv</a></p>'
                    )
                else:
                    filename, draw = s.body
                    draw(tmp / filename)
                    parts.append(
                        f'<figure><img src="{filename}" alt="{html.escape(s.title)}">'
                        f"<figcaption>{html.escape(s.caption)}</figcaption></figure>"
                    )
                parts.append("</section>")
            parts.append("</body></html>\n")
            (tmp / "index.html").write_text("\n".join(parts), encoding="utf-8")
        return target / "index.html"


def _cell(value: object, fmt: Callable[[object], str] | None, column: str = "") -> str:
    """A table cell as text: ``fmt`` if given, else as the CSV writes it (times at the
    bounds of a ``_us`` column as ``inf``/``-inf``), numbers with thousands separators."""
    if value is None:
        return "–"
    if fmt is not None:
        return fmt(value)
    value = csv_value(value, column)
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _html_table(table: Table, formats: Mapping[str, Callable[[object], str]]) -> str:
    cols = list(table)
    n = len(table[cols[0]]) if cols else 0
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    rows = []
    for i in range(n):
        cells = "".join(
            f"<td>{html.escape(_cell(table[c][i], formats.get(c), c))}</td>" for c in cols
        )
        rows.append(f"<tr>{cells}</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def write_csv(path: Path, table: Table) -> None:
    """A column table as CSV (infinities as ``inf``, :func:`spark_backend.report.tables.
    csv_value`); write it inside an atomic directory."""
    cols = list(table)
    n = len(table[cols[0]]) if cols else 0
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for i in range(n):
            w.writerow([csv_value(table[c][i], c) for c in cols])


def seconds(value: object) -> str:
    """Format µs as seconds for a table cell (– for none)."""
    if value is None:
        return "–"
    v = float(value)  # type: ignore[arg-type]
    return "–" if math.isnan(v) else f"{v / 1e6:,.1f} s"


def percent(value: object) -> str:
    """Format a fraction as a percentage for a table cell; a fraction that is not 0 (or
    1) never shows as 0.00 % (or 100.00 %): ``<0.01 %`` (``>99.99 %``)."""
    v = float(value)  # type: ignore[arg-type]
    if math.isnan(v):
        return "–"
    if 0 < v < 1e-4:
        return "<0.01 %"
    if 1 - 1e-4 < v < 1:
        return ">99.99 %"
    return f"{100 * v:.2f} %"


_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
h1 {{ font-size: 1.6em; }} h2 {{ font-size: 1.2em; margin-top: 2em; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
.cap, figcaption {{ color: #555; font-size: 0.85em; }}
.trace {{ color: #555; font-style: italic; margin-top: -0.5em; }}
.scroll {{ overflow-x: auto; max-width: 100%; }}
td {{ white-space: nowrap; }}
</style></head><body>
<h1>{title}</h1>"""
