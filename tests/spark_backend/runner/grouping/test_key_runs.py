"""Gathering a partition's pairs by key in bounded memory (:mod:`.key_runs`): the groups
equal a dict of lists whatever the buffer size, values in arrival order, keys in order
of first arrival; the scratch file is gone once the groups are read or dropped."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.runner.grouping import key_runs

_PAIRS = st.lists(
    st.tuples(st.sampled_from([b"a", b"b", b"", b"\x00k"]), st.binary(max_size=40)),
    max_size=60,
)


@given(pairs=_PAIRS, buffer_bytes=st.integers(1, 200))
@settings(max_examples=80, deadline=None)
def test_groups_equal_a_dict_of_lists(pairs: list[tuple[bytes, bytes]], buffer_bytes: int) -> None:
    expected: dict[bytes, list[bytes]] = {}
    for key, value in pairs:
        expected.setdefault(key, []).append(value)
    got = [(k, list(vs)) for k, vs in key_runs.by_key(iter(pairs), buffer_bytes)]
    assert got == list(expected.items())


def _scratch_files(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    opened: list[Any] = []
    real = key_runs.tempfile.TemporaryFile

    def recording(*args: Any, **kwargs: Any) -> Any:
        opened.append(real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(key_runs.tempfile, "TemporaryFile", recording)
    return opened


def test_values_past_the_buffer_go_through_the_scratch_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened = _scratch_files(monkeypatch)
    pairs = [(b"k%d" % (i % 3), b"v%05d" % i) for i in range(1000)]
    groups = key_runs.by_key(iter(pairs), buffer_bytes=64)
    key, values = next(groups)
    assert key == b"k0" and next(values) == b"v00000"
    assert len(opened) == 1 and not opened[0].closed
    groups.close()  # a consumer that stops early still removes the file
    assert opened[0].closed
