"""A trace made block by block: :class:`BlockedTrace`, so a cluster's tasks can each
make one block and a single process can make the identical whole trace. Times are µs.

The whole trace is the blocks one after the other, each in its own arrival order
(:meth:`~theory.data.trace.Trace.sorted_by_arrival`), then sorted by arrival (stable):
its rows are ordered by (arrival, event time, block, row in its block), which is what
:meth:`BlockedTrace.whole` returns and what a row's place (:func:`block_places`) says.

:func:`session_blocks` cuts :func:`~theory.data.generators.game_sessions_trace` into
blocks of users, each seeded from (seed, block): a different trace from the unblocked
generator of the same seed, with the same statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from theory.columns import check_count
from theory.data.trace import Trace

__all__ = ["BlockedTrace", "block_places", "session_blocks"]


@dataclass(frozen=True)
class BlockedTrace:
    """``blocks`` blocks, block ``i`` made by ``make(i)`` (a picklable callable, run
    where the block is needed); ``events``: the rows of all blocks (for progress lines)."""

    blocks: int
    make: Callable[[int], Trace]
    events: int = 0

    def block(self, i: int) -> Trace:
        """Block ``i`` in its own arrival order (ties: event time, then its row)."""
        return self.make(i).sorted_by_arrival()

    def whole(self) -> Trace:
        """The whole trace, made block by block into preallocated columns (a block at a
        time in memory besides them), in the order of the module docstring."""
        first_i, first = 0, self.block(0)
        while not len(first) and first_i + 1 < self.blocks:  # (empty blocks say no dtypes)
            first_i += 1
            first = self.block(first_i)
        if self.blocks == 1 or not len(first):
            return first
        size = self.events or sum(len(self.make(i)) for i in range(self.blocks))
        names = ["event_time", "arrival_time", "key", "value"]
        if first.partition is not None:
            names.append("partition")
        cols = {n: np.empty(size, getattr(first, n).dtype) for n in names}
        at = 0
        for i in range(first_i, self.blocks):
            b = first if i == first_i else self.block(i)
            if not len(b):
                continue
            if at + len(b) > size:
                raise ValueError(f"block {i} runs past the {size} events the trace states")
            for n in names:
                if getattr(b, n) is None:
                    raise ValueError(f"block {i} has no {n} column and block {first_i} has one")
                cols[n][at : at + len(b)] = getattr(b, n)
            at += len(b)
            del b
        if at != size:
            raise ValueError(f"the blocks hold {at} events, not the {size} the trace states")
        # the stable sort by arrival, then event time, one column at a time (in place of
        # a copy of every column at once)
        order = np.lexsort((cols["event_time"], cols["arrival_time"]))
        for n in names:
            cols[n] = cols[n][order]
        del order
        return Trace(**cols)


def block_places(trace: Trace, block: int) -> np.ndarray:
    """The places of a block's rows (``trace``: :meth:`BlockedTrace.block`'s) in the whole
    trace: (arrival, event time, block, row) int64 columns, compared lexicographically."""
    n = len(trace)
    return np.column_stack([trace.arrival_time, trace.event_time,
                            np.full(n, block, np.int64), np.arange(n, dtype=np.int64)])  # fmt: skip


def session_blocks(
    n: int, *, seed: int, blocks: int, users: int = 100, **params: Any
) -> BlockedTrace:
    """:func:`~theory.data.generators.game_sessions_trace` in ``blocks`` blocks: block
    ``i`` has users ``first_user + [lo_i, hi_i)`` (``users`` cut evenly) and
    ``n * (hi_i - lo_i) // users`` events or one more (``n`` in all), seeded from
    ``(seed, i)``. ValueError if ``blocks`` exceeds ``users``."""
    check_count(blocks, "blocks", minimum=1)
    check_count(users, "users", minimum=1)
    check_count(n, "n")
    if blocks > users:
        raise ValueError(f"blocks must be <= users ({users}), got {blocks}")
    return BlockedTrace(blocks, partial(_session_block, n, seed, blocks, users, params), n)


def _bounds(total: int, parts: int, i: int) -> tuple[int, int]:
    return total * i // parts, total * (i + 1) // parts


def _session_block(n: int, seed: int, blocks: int, users: int, params: dict[str, Any],
                   i: int) -> Trace:  # fmt: skip
    from theory.data.generators import game_sessions_trace

    lo, hi = _bounds(users, blocks, i)
    e_lo, e_hi = n * lo // users, n * hi // users
    block_seed = int(np.random.SeedSequence([seed, i]).generate_state(1)[0])
    first = params.get("first_user", 0)
    rest = {k: v for k, v in params.items() if k != "first_user"}
    return game_sessions_trace(e_hi - e_lo, seed=block_seed, users=hi - lo,
                               first_user=first + lo, **rest)  # fmt: skip
