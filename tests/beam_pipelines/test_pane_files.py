"""pane_files' part files: a retried bundle (the same content written twice) is read once;
a pane that two bundles emit with different content is read twice, so assert_panes shows it.

What content-hash naming cannot tell apart (decided, see the module docstring): a runner
that emits the *same* pane, identical in every field, from two different bundles looks like
a retry and is read once."""

from __future__ import annotations

import math
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_pipelines import plain_json
from beam_pipelines.pane_files import PaneRow, encode_rows, part_files, read_panes, write_part


def row(value: int, index: int = 0) -> PaneRow:
    return PaneRow("k", 0, 60_000_000, 59_999_999, "ON_TIME", index, index == 0, False, value)


def test_a_retried_bundle_is_read_once_and_a_conflicting_pane_twice(tmp_path: Path) -> None:
    stage = tmp_path / "panes"
    write_part(str(stage), 100, encode_rows([row(1)]))
    write_part(str(stage), 250, encode_rows([row(1)]))  # the retry: same content, later
    write_part(str(stage), 300, encode_rows([row(2, index=1)]))
    assert [start for start, _ in part_files(tmp_path, "panes")] == [100, 300]
    assert read_panes(tmp_path, "panes") == [row(1), row(2, index=1)]

    write_part(str(stage), 400, encode_rows([row(3, index=1)]))  # pane 1 again, other value
    assert read_panes(tmp_path, "panes") == [row(1), row(2, index=1), row(3, index=1)]
    assert sorted(p.name for p in stage.iterdir())[0].startswith("00000000000000000100-")


class _Payload:
    """Unpickling it creates ``marker``: proof that code ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.mkdir, (self.marker,))


def test_a_planted_pickle_is_refused_naming_the_file_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    stage = tmp_path / "panes"
    write_part(str(stage), 100, pickle.dumps(_Payload(str(marker))))
    with pytest.raises(ValueError, match=r"\.panes: not a pane file"):
        read_panes(tmp_path, "panes")
    assert not marker.exists()
    pickle.loads((next(stage.iterdir())).read_bytes())  # the payload is live
    assert marker.exists()


def test_a_value_of_another_type_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    write_part(str(tmp_path / "panes"), 100, encode_rows([row(1), _row_of(object())]))
    problems: list[str] = []
    assert read_panes(tmp_path, "panes", problems.append) == [row(1)]
    assert len(problems) == 1 and "type object cannot be stored" in problems[0]


def _row_of(value: Any, key: Any = "k") -> PaneRow:
    return PaneRow(key, 0, 10, 9, "EARLY", 0, True, False, value)


_plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3)
    ),
    max_leaves=8,
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(_plain, _plain)
def test_plain_values_round_trip_with_their_types(key: Any, value: Any) -> None:
    assert _same(plain_json.decode(plain_json.encode(value)), value)
    (got,) = _decoded(encode_rows([_row_of(value, key)]))
    assert isinstance(got, PaneRow) and _same(got.value, value) and _same(got.key, key)


def _decoded(data: bytes) -> list[Any]:
    from beam_pipelines.pane_files import decode_rows

    return decode_rows(data, "part")


@pytest.mark.parametrize(
    "data", [{"t": 1}, {"x": []}, {"d": [[1]]}, {"f": "1e3"}, {"b": "***"}, {"t": [], "b": ""}]
)
def test_shapes_encode_never_writes_are_refused(data: Any) -> None:
    with pytest.raises(ValueError):
        plain_json.decode(data)
