"""The spill file of state-backed iterables: what a group writes, read back page by page
as the SDK reads a ``runner`` state key (each page decoded on its own)."""

from __future__ import annotations

from typing import Any

from apache_beam.coders import StrUtf8Coder, VarIntCoder
from apache_beam.coders.coder_impl import create_InputStream
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.runner.grouping.spilled_groups import GroupSpill, read_page, remove_spill


def read_back(token: bytes, impl: Any) -> tuple[list[Any], int]:
    values: list[Any] = []
    pages, continuation = 0, None
    while True:
        data, continuation, _ = read_page(token, continuation)
        stream = create_InputStream(data)
        while stream.size() > 0:  # a page holds whole values
            values.append(impl.decode_from_stream(stream, True))
        pages += 1
        if continuation is None:
            return values, pages


@settings(max_examples=40, deadline=None)
@given(
    groups=st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300), max_size=4),
    page_bytes=st.integers(1, 200),
)
def test_each_group_reads_back_whole_and_in_order(groups: list[list[int]], page_bytes: int) -> None:
    impl = VarIntCoder().get_impl()
    spill = GroupSpill(page_bytes)
    tokens = [spill.write(iter(values), impl) for values in groups]
    spill.close()
    try:
        for values, token in zip(groups, tokens, strict=True):
            read, pages = read_back(token, impl)
            assert read == values
            encoded = sum(len(impl.encode_nested(v)) for v in values)
            assert pages <= max(1, -(-encoded // page_bytes))  # each page at least page_bytes
    finally:
        remove_spill(spill.path)


def test_a_token_names_its_range_of_the_file() -> None:
    impl = StrUtf8Coder().get_impl()
    spill = GroupSpill(8)
    first = spill.write(iter(["a", "bb"]), impl)
    second = spill.write(iter(["ccc"] * 5), impl)
    spill.close()
    try:
        assert read_back(first, impl) == (["a", "bb"], 1)
        assert read_back(second, impl) == (["ccc"] * 5, 3)  # 4 + 4 + ... bytes, pages of 8
    finally:
        remove_spill(spill.path)
