"""Values whose coders write them differently nested and outer (strings, bytes), and a
CombineFn over strings: the coded-value differential tests of batch and streaming."""

from __future__ import annotations

from typing import Any

import apache_beam as beam

#: ``(key, value)`` strings: non-ASCII, empty, repeated keys.
ROWS = [("key1", "foo"), ("key2", "bar"), ("key1", "foo"), ("k\u00e9y3", "\u00fcml"), ("key2", "")]


class Concat(beam.CombineFn):  # type: ignore[misc]
    """Joins strings with ``|`` in sorted order, so that every runner agrees."""

    def create_accumulator(self) -> list[str]:
        return []

    def add_input(self, acc: list[str], x: str) -> list[str]:
        return [*acc, x]

    def merge_accumulators(self, accs: Any) -> list[str]:
        return [x for acc in accs for x in acc]

    def extract_output(self, acc: list[str]) -> str:
        return "|".join(sorted(acc))
