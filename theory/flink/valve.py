"""Flink's ``StatusWatermarkValve``: in-band watermark and idleness propagation.

A Flink task with ``n`` input channels feeds every watermark and every stream status
(``ACTIVE``/``IDLE``, called ``WatermarkStatus`` since Flink 1.14) that arrives on a
channel into a valve. The valve decides what the task forwards downstream:

- its output watermark is the minimum over the *aligned* channels, emitted only when it
  advances past the last output;
- a channel is aligned unless it is idle, or it resumed with a watermark below the last
  output and has not caught up (``>=``) yet;
- per-channel watermarks are monotonic: a lower or equal one is ignored, and so is any
  watermark on an idle channel (or while the whole valve is idle);
- when every channel is idle the valve emits ``IDLE``, first flushing the maximum
  watermark over all channels if the channel that just went idle held the last output;
  the first channel to resume makes it emit ``ACTIVE``.

Watermarks are the ints the caller passes, µs in ``[MIN_TIMESTAMP, MAX_TIMESTAMP]`` (the
``theory.time`` bounds). The valve only compares them, so it is agnostic of the
convention: the flink profile passes Flink-convention values (``no more data <= W``)
unchanged. ``MIN_TIMESTAMP`` plays the role of Flink's ``Long.MIN_VALUE``: every channel
and the valve's last output start there.

Two implementations with identical outputs:

- :class:`StatusWatermarkValve` keeps the aligned channels in an :class:`IndexedMinHeap`,
  so an update costs O(log n) (Flink >= 1.17, FLINK-30544), and keeps the count of active
  channels and the maximum watermark incrementally, so no operation scans the channels.
  A heap rather than :class:`~theory.structures.Frontier`: on ``bench/valve.py`` the
  frontier took several times as long per update, and its cheap path (``move``) is
  still slower than the heap (figures in ``bench/RESULTS.md``);
- :class:`LinearScanValve` is the reference: the Flink 1.11 code, an O(n) scan over the
  channels for the minimum, the "any active channel" test and the maximum.

Each ``input_*`` call returns what the valve emits, in order: ``int`` watermarks and
:class:`StreamStatus` values. Bad input raises before any state changes, so a caller that
catches the error still has a consistent valve: ``TypeError`` for a channel or watermark
that is not an int (``bool`` included) or a status that is not a :class:`StreamStatus`,
``ValueError`` for a channel out of range or a watermark outside the timestamp range.

``flink_40475=True`` selects the behaviour described by the FLINK-40475 pull request
(apache/flink#29024): a resuming channel re-derives the minimum (after ``ACTIVE`` is
emitted), and the all-idle flush is unconditional. The default is the rule of every
released valve from 1.4 to 2.x: flush only if the channel that went idle held the last
output watermark.
"""

from __future__ import annotations

import enum
from itertools import compress
from typing import NamedTuple

from theory.columns import as_int, check_count, check_timestamp
from theory.structures import IndexedMinHeap
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = [
    "ChannelState",
    "LinearScanValve",
    "StatusWatermarkValve",
    "StreamStatus",
    "ValveOutput",
    "WatermarkStatus",
]


class StreamStatus(enum.Enum):
    """A channel's or the valve's status: ``ACTIVE`` or ``IDLE`` (Flink's WatermarkStatus)."""

    ACTIVE = "ACTIVE"
    IDLE = "IDLE"

    @property
    def is_active(self) -> bool:
        """True for ``ACTIVE``."""
        return self is StreamStatus.ACTIVE

    @property
    def is_idle(self) -> bool:
        """True for ``IDLE``."""
        return self is StreamStatus.IDLE


#: Flink's name for :class:`StreamStatus` since 1.14 (FLIP-180).
WatermarkStatus = StreamStatus

ACTIVE = StreamStatus.ACTIVE
IDLE = StreamStatus.IDLE

#: One item emitted by a valve: a watermark (int) or a status.
ValveOutput = int | StreamStatus


class ChannelState(NamedTuple):
    """One input channel as the valve sees it."""

    watermark: int
    status: StreamStatus
    aligned: bool


# ---------------------------------------------------------------------------------------
# Input validation shared by both valves (raises before any state changes)
# ---------------------------------------------------------------------------------------


def _check_channel(channel: object, n: int) -> int:
    """The slow path of channel validation: numpy ints are accepted, the rest raise."""
    c = as_int(channel, "channel")
    if not 0 <= c < n:
        raise ValueError(f"channel={c} is out of range: the valve has {n} channels [0, {n - 1}]")
    return c


def _check_status(status: object) -> StreamStatus:
    if not isinstance(status, StreamStatus):
        raise TypeError(f"status must be StreamStatus.ACTIVE or StreamStatus.IDLE, got {status!r}")
    return status


# ---------------------------------------------------------------------------------------
# The heap valve
# ---------------------------------------------------------------------------------------


class StatusWatermarkValve:
    """Flink's valve over ``num_channels`` input channels, O(log n) per input.

    All channels start ``ACTIVE`` and aligned at ``MIN_TIMESTAMP``; the valve starts
    ``ACTIVE`` with last output ``MIN_TIMESTAMP``. See the module docstring for the rules
    and for ``flink_40475``.
    """

    __slots__ = (
        "_active",
        "_fix",
        "_heap",
        "_idle",
        "_last",
        "_max",
        "_n",
        "_num_active",
        "_wm",
    )

    def __init__(self, num_channels: int, *, flink_40475: bool = False) -> None:
        n = check_count(num_channels, "num_channels", minimum=1)
        self._n = n
        self._fix = bool(flink_40475)
        self._wm: list[int] = [MIN_TIMESTAMP] * n  # last accepted watermark per channel
        self._active: list[bool] = [True] * n  # channel status, True = ACTIVE
        self._num_active = n
        # the aligned channels, keyed by watermark; a channel is aligned iff it is in here
        self._heap = IndexedMinHeap.from_keys(self._wm)
        self._last = MIN_TIMESTAMP  # last watermark emitted
        self._idle = False  # last status emitted is IDLE
        self._max = MIN_TIMESTAMP  # max over channel watermarks (they only grow)

    # -- inputs -----------------------------------------------------------------------

    def input_watermark(self, channel: int, watermark: int) -> list[ValveOutput]:
        """Feed ``watermark`` (int µs) arriving on ``channel``; return what is emitted."""
        # validate everything before touching state (fast path for plain ints)
        if type(channel) is not int or not 0 <= channel < self._n:
            channel = _check_channel(channel, self._n)
        if type(watermark) is not int or not MIN_TIMESTAMP <= watermark <= MAX_TIMESTAMP:
            watermark = check_timestamp(watermark, "watermark")
        # an idle channel, or an idle valve (all channels idle), ignores watermarks
        if self._idle or not self._active[channel]:
            return []
        wm = self._wm
        # per-channel monotonic: a watermark not above the channel's last one is ignored
        if watermark <= wm[channel]:
            return []
        wm[channel] = watermark
        if watermark > self._max:
            self._max = watermark
        heap = self._heap
        slot = heap.pos[channel]
        if slot >= 0:
            # an aligned channel's key grew: sift it down (IndexedMinHeap._sift_down inlined,
            # this is the hot path)
            keys = heap.keys
            items = heap.items
            pos = heap.pos
            n = len(keys)
            child = 2 * slot + 1
            while child < n:
                ckey = keys[child]
                right = child + 1
                if right < n:
                    rkey = keys[right]
                    if rkey < ckey:
                        child = right
                        ckey = rkey
                if ckey >= watermark:
                    break
                keys[slot] = ckey
                citem = items[child]
                items[slot] = citem
                pos[citem] = slot
                slot = child
                child = 2 * slot + 1
            keys[slot] = watermark
            items[slot] = channel
            pos[channel] = slot
        elif watermark >= self._last:
            # a previously unaligned channel is aligned again once it has caught up with the
            # last output (>=: at equality it holds the output again, as in Flink)
            heap.push(channel, watermark)
        # the minimum over aligned channels is output if there is one and it advanced. As in
        # Flink this follows every accepted watermark, even one that left the aligned set
        # unchanged: that matters only after the released valve's resume stall (FLINK-40475)
        keys = heap.keys
        if keys and keys[0] > self._last:
            self._last = low = keys[0]
            return [low]
        return []

    def input_status(self, channel: int, status: StreamStatus) -> list[ValveOutput]:
        """Feed ``status`` arriving on ``channel``; return what is emitted."""
        if type(channel) is not int or not 0 <= channel < self._n:
            channel = _check_channel(channel, self._n)
        _check_status(status)
        if status is IDLE:
            # IDLE on an idle channel is not a toggle: no effect
            return self._go_idle(channel) if self._active[channel] else []
        # ACTIVE on an active channel is not a toggle: no effect
        return [] if self._active[channel] else self._resume(channel)

    def _go_idle(self, channel: int) -> list[ValveOutput]:
        """ACTIVE -> IDLE: the channel is idle, therefore no longer aligned."""
        self._active[channel] = False
        self._num_active -= 1
        heap = self._heap
        if heap.pos[channel] >= 0:
            heap.remove(channel)
        held_min = self._wm[channel] == self._last
        if self._num_active == 0:
            # every channel is idle and none will advance: flush the maximum over all
            # channels. The minimum was advanced as channels went idle one by one, so
            # the released rule flushes only if the channel that just went idle held the
            # last output; FLINK-40475 flushes unconditionally.
            out: list[ValveOutput] = []
            if (held_min or self._fix) and self._max > self._last:
                self._last = self._max
                out.append(self._max)
            # the valve itself becomes idle
            self._idle = True
            out.append(IDLE)
            return out
        if held_min:
            # the channel held the overall minimum: the remaining aligned channels may
            # yield a new one
            return self._new_min()
        return []

    def _resume(self, channel: int) -> list[ValveOutput]:
        """IDLE -> ACTIVE."""
        self._active[channel] = True
        self._num_active += 1
        wm = self._wm[channel]
        if wm >= self._last:
            # its watermark from before it went idle has not fallen behind: aligned at once.
            # Behind the last output it stays out of the minimum, which would hold back an
            # output that has already passed it, until input_watermark sees it catch up
            self._heap.push(channel, wm)
        out: list[ValveOutput] = []
        if self._idle:
            # the valve was idle and now has an active channel
            self._idle = False
            out.append(ACTIVE)
        if self._fix:
            # FLINK-40475: re-derive the minimum after the ACTIVE status went out
            out.extend(self._new_min())
        return out

    def _new_min(self) -> list[ValveOutput]:
        """Emit the minimum over aligned channels if there is one above the last output."""
        keys = self._heap.keys
        if keys and keys[0] > self._last:
            self._last = keys[0]
            return [keys[0]]
        return []

    # -- introspection ----------------------------------------------------------------

    @property
    def num_channels(self) -> int:
        """The number of input channels."""
        return self._n

    @property
    def last_output_watermark(self) -> int:
        """The last watermark emitted (``MIN_TIMESTAMP`` before the first)."""
        return self._last

    @property
    def last_output_status(self) -> StreamStatus:
        """The last status emitted (``ACTIVE`` initially)."""
        return IDLE if self._idle else ACTIVE

    def channel_state(self, channel: int) -> ChannelState:
        """The channel's last watermark, status and alignment."""
        c = _check_channel(channel, self._n)
        return ChannelState(
            self._wm[c], ACTIVE if self._active[c] else IDLE, self._heap.pos[c] >= 0
        )

    def state(self) -> tuple[tuple[ChannelState, ...], int, StreamStatus]:
        """Every channel's state, the last output watermark and the last output status."""
        return (
            tuple(self.channel_state(c) for c in range(self._n)),
            self._last,
            self.last_output_status,
        )


# ---------------------------------------------------------------------------------------
# The linear-scan reference (Flink 1.11)
# ---------------------------------------------------------------------------------------


class LinearScanValve:
    """The reference valve: the same rules as :class:`StatusWatermarkValve`, with O(n)
    scans over the channels (for the minimum over aligned channels, "is any channel
    active", and the maximum), as Flink 1.11 to 1.16 did.
    """

    __slots__ = ("_active", "_aligned", "_fix", "_last", "_last_status", "_n", "_wm")

    def __init__(self, num_channels: int, *, flink_40475: bool = False) -> None:
        n = check_count(num_channels, "num_channels", minimum=1)
        self._n = n
        self._fix = bool(flink_40475)
        self._wm: list[int] = [MIN_TIMESTAMP] * n
        self._active: list[bool] = [True] * n
        self._aligned: list[bool] = [True] * n
        self._last = MIN_TIMESTAMP
        self._last_status = ACTIVE

    def input_watermark(self, channel: int, watermark: int) -> list[ValveOutput]:
        """Feed ``watermark`` (int µs) arriving on ``channel``; return what is emitted."""
        channel = _check_channel(channel, self._n)
        watermark = check_timestamp(watermark, "watermark")
        # ignore it if its channel, or every channel (the valve), is idle
        if self._last_status is IDLE or not self._active[channel]:
            return []
        # ignore it also if it is not above the channel's last watermark
        if watermark <= self._wm[channel]:
            return []
        self._wm[channel] = watermark
        # an unaligned channel is aligned again once it has caught up
        if not self._aligned[channel] and watermark >= self._last:
            self._aligned[channel] = True
        # try to find a new minimum across the aligned channels
        return self._new_min()

    def input_status(self, channel: int, status: StreamStatus) -> list[ValveOutput]:
        """Feed ``status`` arriving on ``channel``; return what is emitted."""
        channel = _check_channel(channel, self._n)
        _check_status(status)
        out: list[ValveOutput] = []
        if status is IDLE and self._active[channel]:
            # ACTIVE -> IDLE; an idle channel is not aligned
            self._active[channel] = False
            self._aligned[channel] = False
            if not any(self._active):
                # all idle: flush the max if the channel that went idle held the min
                # (unconditionally under FLINK-40475), then the valve goes idle
                if self._fix or self._wm[channel] == self._last:
                    out.extend(self._max_flush())
                self._last_status = IDLE
                out.append(IDLE)
            elif self._wm[channel] == self._last:
                # it held the overall minimum: the remaining aligned channels may advance it
                out.extend(self._new_min())
        elif status is ACTIVE and not self._active[channel]:
            # IDLE -> ACTIVE; aligned at once if its watermark did not fall behind
            self._active[channel] = True
            if self._wm[channel] >= self._last:
                self._aligned[channel] = True
            # the first channel to resume makes an idle valve active
            if self._last_status is IDLE:
                self._last_status = ACTIVE
                out.append(ACTIVE)
            if self._fix:
                out.extend(self._new_min())
        # any other input (ACTIVE on active, IDLE on idle) is not a toggle: no effect
        return out

    def _new_min(self) -> list[ValveOutput]:
        # output the minimum over aligned channels only if some channel is aligned and it
        # advanced (without the first test, no aligned channel would emit MAX; FLINK-7721)
        low = min(compress(self._wm, self._aligned), default=None)
        if low is not None and low > self._last:
            self._last = low
            return [low]
        return []

    def _max_flush(self) -> list[ValveOutput]:
        high = max(self._wm)
        if high > self._last:
            self._last = high
            return [high]
        return []

    @property
    def num_channels(self) -> int:
        """The number of input channels."""
        return self._n

    @property
    def last_output_watermark(self) -> int:
        """The last watermark emitted (``MIN_TIMESTAMP`` before the first)."""
        return self._last

    @property
    def last_output_status(self) -> StreamStatus:
        """The last status emitted (``ACTIVE`` initially)."""
        return self._last_status

    def channel_state(self, channel: int) -> ChannelState:
        """The channel's last watermark, status and alignment."""
        c = _check_channel(channel, self._n)
        return ChannelState(self._wm[c], ACTIVE if self._active[c] else IDLE, self._aligned[c])

    def state(self) -> tuple[tuple[ChannelState, ...], int, StreamStatus]:
        """Every channel's state, the last output watermark and the last output status."""
        return (
            tuple(self.channel_state(c) for c in range(self._n)),
            self._last,
            self._last_status,
        )
