"""The experiments' results show as tables in a notebook (``_repr_html_``): one row per
row of :meth:`table`, each cell its value's text, escaped."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory import SECOND, Trace, compare_systems
from theory.experiments import Strategy, tradeoff
from theory.experiments.html import html_cell, html_table
from theory.experiments.propagation import propagation

CELLS = st.one_of(st.integers(), st.text(max_size=8), st.booleans(), st.none(),
                  st.floats(allow_nan=True, allow_infinity=True))


def _cells(text: str) -> list[list[str]]:
    """The table's body as rows of unescaped cell texts."""
    body = re.search(r"<tbody>(.*)</tbody>", text, re.S).group(1)
    return [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 6).flatmap(
    lambda n: st.dictionaries(st.text(min_size=1, max_size=5), st.lists(CELLS, min_size=n,
                                                                         max_size=n),
                              max_size=4)))
def test_every_cell_is_its_value_escaped(table: dict[str, list[object]]) -> None:
    text = html_table(table)
    n = len(next(iter(table.values()))) if table else 0
    want = [[html_cell(v[i]) for v in table.values()] for i in range(n)]
    assert _cells(text) == want
    heads = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", text, re.S)]
    assert heads == list(table)
    assert "<script" not in text.replace("&lt;script", "")


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        html_table({"a": [1, 2], "b": [1]})


def test_the_results_show_as_their_tables() -> None:
    """tradeoff, compare_systems and propagation results: their ``table()`` in HTML."""
    rng = np.random.default_rng(2)
    e = np.sort(rng.integers(0, 600 * SECOND, 300))
    a = e + rng.integers(0, 20 * SECOND, 300)
    order = np.argsort(a, kind="stable")
    trace = Trace(e[order], a[order], rng.integers(0, 3, 300)[order], np.ones(300))
    results = [
        tradeoff(trace, [Strategy("perfect", "perfect"), Strategy("b", "bounded:10s")],
                 window_size=60 * SECOND),
        compare_systems(trace, bound=10 * SECOND, window_size=60 * SECOND),
        propagation(depths=(1,), parallelisms=(1,), scenarios=("steady",), seed=0),
    ]
    for r in results:
        t = r.table()
        rows = _cells(r._repr_html_())
        assert rows == [[html_cell(v[i]) for v in t.values()] for i in range(len(rows))]
        assert len(rows) == len(next(iter(t.values()))) >= 1
