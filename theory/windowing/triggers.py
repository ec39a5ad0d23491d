"""Triggers: Beam's trigger language, with Beam Python's runner semantics.

A trigger decides when a window's pane fires. The classes here mirror Beam Python's
``TriggerFn`` subclasses method for method (``on_element``, ``on_merge``, ``should_fire``,
``on_fire``, ``reset``, ``has_ontime_pane``), so that
:class:`theory.windowing.engine.GroupByWindowEngine`
fires exactly the panes Beam's ``GeneralTriggerDriver`` fires on the (Bundle based) direct
runner. All times are µs; windows are ``(start, end)`` tuples.

- :class:`DefaultTrigger`: ``Repeatedly(AfterWatermark())``: a watermark timer at the end of
  the window, then one pane per batch of late data.
- :class:`AfterWatermark`: ``early=``/``late=`` sub-triggers, each wrapped in
  :class:`Repeatedly` as Beam does. Finishes at the watermark unless ``late`` is given.
- :class:`AfterProcessingTime`: once, ``delay`` µs of processing time after the first element.
- :class:`AfterCount`: once, when the pane holds ``count`` elements.
- :class:`Repeatedly`, :class:`AfterAny`, :class:`AfterAll`, :class:`AfterEach`,
  :class:`OrFinally`: composites. :class:`Never` (Beam's ``_Never``) and :class:`Always`.

Runner behaviours kept on purpose (each has a named test in
``tests/theory/windowing/test_triggers.py``):

- A timer firing passes the *timer's* timestamp as "the watermark" to ``should_fire`` and
  ``on_fire``, in both time domains. So a processing-time timer whose time is at or past
  ``window.end`` makes ``AfterWatermark`` (and ``DefaultTrigger``) fire as if the watermark
  had passed the window (the Beam model keeps the domains apart).
- ``AfterAny``/``AfterAll``/``AfterEach.on_fire`` ask each sub-trigger ``should_fire`` again
  in the *watermark* domain, so a sub-trigger that fired on processing time is neither
  told it fired nor reset: ``AfterAny(AfterProcessingTime(d), ...)`` fires but never
  finishes through its processing-time branch.
- ``should_fire`` of the parallel composites short-circuits (``any``/``all``), so later
  sub-triggers' side effects (clearing their timers) may not run.
- ``Never.has_ontime_pane()`` is falsy (Beam's ``_Never`` forgets to return a value).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from theory.columns import DurationLike, as_duration, check_count

#: A window inside the engine and the triggers: ``(start, end)`` in µs.
Win = tuple[int, int]


class TimeDomain(StrEnum):
    """The clock a timer is set in."""

    WATERMARK = "watermark"
    REAL_TIME = "processing_time"


WATERMARK = TimeDomain.WATERMARK
REAL_TIME = TimeDomain.REAL_TIME

# Trigger state tags and how a merged window combines them (Beam's combining state).
_SUM, _ANY, _MAX = "sum", "any", "max"
TAG_KIND: dict[str, str] = {"count": _SUM, "is_late": _ANY, "has_timer": _ANY, "index": _MAX}


def combine_tag(name: str, a: Any, b: Any) -> Any:
    """Combine two windows' values of trigger state ``name`` when they merge."""
    kind = TAG_KIND[name.rsplit("/", 1)[-1]]
    if kind == _SUM:
        return a + b
    if kind == _ANY:
        return bool(a or b)
    return max(a, b)


class TriggerContext(Protocol):
    """What a trigger may touch: its window's state and timers, and processing time (µs).

    State tags are ``count`` (a sum), ``is_late`` and ``has_timer`` (flags) and ``index``
    (a max); missing state reads as 0/False.
    """

    @property
    def now(self) -> int: ...

    def get(self, tag: str) -> Any: ...

    def add(self, tag: str, value: Any) -> None: ...

    def clear(self, tag: str) -> None: ...

    def set_timer(self, name: Hashable, domain: TimeDomain, timestamp: int) -> None: ...

    def clear_timer(self, name: Hashable, domain: TimeDomain) -> None: ...

    def nested(self, prefix: str) -> TriggerContext: ...


class Trigger:
    """Base of all triggers; the methods follow Beam's ``TriggerFn``."""

    __slots__ = ()

    def on_element(self, window: Win, ctx: TriggerContext, n: int = 1) -> None:
        """``n`` elements arrived in ``window`` (Beam calls once per element)."""

    def on_merge(self, merged: list[Win], result: Win, ctx: TriggerContext) -> None:
        """``merged`` windows became ``result`` (ctx is the result's)."""

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        """Whether the window fires; ``watermark`` is the timer's time for timer firings."""
        raise NotImplementedError

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        """Called when the window fires; returns whether the trigger is finished."""
        raise NotImplementedError

    def reset(self, window: Win, ctx: TriggerContext) -> None:
        """Clear this trigger's state (not always its timers, as in Beam)."""

    def has_ontime_pane(self) -> bool:
        """Whether the trigger guarantees an ON_TIME pane (keeps holds over early panes)."""
        return False

    def may_finish(self, allowed_lateness: int) -> bool:
        """Beam's ``may_lose_data(...) & MAY_FINISH``: whether Beam calls it unsafe."""
        return False

    def watermark_only(self) -> bool:
        """True for the triggers the engine's fast paths handle: DefaultTrigger and a bare
        AfterWatermark()."""
        return False


@dataclass(frozen=True, slots=True)
class DefaultTrigger(Trigger):
    """Beam's default trigger: fire when the watermark reaches ``window.end``, then once
    per batch of late data; never finishes."""

    def on_element(self, window: Win, ctx: TriggerContext, n: int = 1) -> None:
        ctx.set_timer(("window", window), WATERMARK, window[1])

    def on_merge(self, merged: list[Win], result: Win, ctx: TriggerContext) -> None:
        for w in merged:
            ctx.clear_timer(("window", w), WATERMARK)

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        if watermark >= window[1]:
            ctx.clear_timer(("window", window), WATERMARK)
            return True
        return False

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        return False

    def reset(self, window: Win, ctx: TriggerContext) -> None:
        ctx.clear_timer(("window", window), WATERMARK)

    def has_ontime_pane(self) -> bool:
        return True

    def watermark_only(self) -> bool:
        return True


@dataclass(frozen=True, slots=True, init=False)
class AfterProcessingTime(Trigger):
    """Fire once, ``delay`` µs of processing time after the window's first element.

    Beam Python's delay is whole seconds (it goes through the runner API in ms, divided by
    1000); ``beam_pipelines`` refuses other delays.
    """

    delay: int = 0

    def __init__(self, delay: DurationLike = 0) -> None:
        """``delay``: µs as an int, a ``timedelta``, or a string like ``"10s"``."""
        object.__setattr__(self, "delay", as_duration(delay, "AfterProcessingTime delay"))

    def on_element(self, window: Win, ctx: TriggerContext, n: int = 1) -> None:
        if not ctx.get("has_timer"):
            ctx.set_timer("", REAL_TIME, ctx.now + self.delay)
        ctx.add("has_timer", True)

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        return domain is REAL_TIME

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        return True

    def reset(self, window: Win, ctx: TriggerContext) -> None:
        ctx.clear("has_timer")

    def may_finish(self, allowed_lateness: int) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class AfterCount(Trigger):
    """Fire once the pane holds at least ``count`` (>= 1) elements."""

    count: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", check_count(self.count, "AfterCount count", minimum=1))

    def on_element(self, window: Win, ctx: TriggerContext, n: int = 1) -> None:
        ctx.add("count", n)

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        return bool(ctx.get("count") >= self.count)

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        return True

    def reset(self, window: Win, ctx: TriggerContext) -> None:
        ctx.clear("count")

    def may_finish(self, allowed_lateness: int) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Always(Trigger):
    """Fire on every element (and every evaluation); never finishes."""

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        return True

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Never(Trigger):
    """Beam's ``_Never``: never fires. On Beam Python's streaming runner nothing releases
    the data at window closing either, so its holds stay and the pipeline stalls."""

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        return False

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Repeatedly(Trigger):
    """Fire whenever ``underlying`` fires, resetting it when it finishes; never finishes."""

    underlying: Trigger

    def __post_init__(self) -> None:
        _check_trigger(self.underlying, "Repeatedly underlying")

    def on_element(self, window: Win, ctx: TriggerContext, n: int = 1) -> None:
        self.underlying.on_element(window, ctx, n)

    def on_merge(self, merged: list[Win], result: Win, ctx: TriggerContext) -> None:
        self.underlying.on_merge(merged, result, ctx)

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        return self.underlying.should_fire(domain, watermark, window, ctx)

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        if self.underlying.on_fire(watermark, window, ctx):
            self.underlying.reset(window, ctx)
        return False

    def reset(self, window: Win, ctx: TriggerContext) -> None:
        self.underlying.reset(window, ctx)

    def has_ontime_pane(self) -> bool:
        return self.underlying.has_ontime_pane()


def _repeat(trigger: Trigger | None) -> Repeatedly | None:
    if trigger is None or isinstance(trigger, Repeatedly):
        return trigger
    return Repeatedly(trigger)


@dataclass(frozen=True, slots=True)
class AfterWatermark(Trigger):
    """Fire when the watermark reaches ``window.end`` (the ON_TIME pane).

    ``early`` fires speculative panes before it, ``late`` fires late panes after it; each is
    wrapped in :class:`Repeatedly` as Beam does. Without ``late`` the trigger finishes at
    the ON_TIME pane and later data for the window is dropped (counted as ``closed``).
    """

    early: Trigger | None = None
    late: Trigger | None = None

    def __post_init__(self) -> None:
        if self.early is not None:
            _check_trigger(self.early, "AfterWatermark early")
        if self.late is not None:
            _check_trigger(self.late, "AfterWatermark late")
        object.__setattr__(self, "early", _repeat(self.early))
        object.__setattr__(self, "late", _repeat(self.late))

    def _is_late(self, ctx: TriggerContext) -> bool:
        return self.late is not None and bool(ctx.get("is_late"))

    def on_element(self, window: Win, ctx: TriggerContext, n: int = 1) -> None:
        if self._is_late(ctx):
            self.late.on_element(window, ctx.nested("late"), n)  # type: ignore[union-attr]
        else:
            ctx.set_timer("", WATERMARK, window[1])
            if self.early is not None:
                self.early.on_element(window, ctx.nested("early"), n)

    def on_merge(self, merged: list[Win], result: Win, ctx: TriggerContext) -> None:
        if self._is_late(ctx):
            self.late.on_merge(merged, result, ctx.nested("late"))  # type: ignore[union-attr]
        else:
            for w in merged:
                if w[1] != result[1]:
                    ctx.clear_timer("", WATERMARK)
            if self.early is not None:
                self.early.on_merge(merged, result, ctx.nested("early"))

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        if self._is_late(ctx):
            return self.late.should_fire(  # type: ignore[union-attr]
                domain, watermark, window, ctx.nested("late")
            )
        if watermark >= window[1]:
            ctx.clear_timer("", WATERMARK)
            return True
        if self.early is not None:
            return self.early.should_fire(domain, watermark, window, ctx.nested("early"))
        return False

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        if self._is_late(ctx):
            return self.late.on_fire(watermark, window, ctx.nested("late"))  # type: ignore[union-attr]
        if watermark >= window[1]:
            ctx.add("is_late", True)
            return self.late is None
        if self.early is not None:
            self.early.on_fire(watermark, window, ctx.nested("early"))
        return False

    def reset(self, window: Win, ctx: TriggerContext) -> None:
        if self.late is not None:
            ctx.clear("is_late")
        if self.early is not None:
            self.early.reset(window, ctx.nested("early"))
        if self.late is not None:
            self.late.reset(window, ctx.nested("late"))

    def has_ontime_pane(self) -> bool:
        return True

    def may_finish(self, allowed_lateness: int) -> bool:
        if allowed_lateness == 0:
            return False
        if self.late is None:
            return True
        return self.late.may_finish(allowed_lateness)

    def watermark_only(self) -> bool:
        return self.early is None and self.late is None


class _Parallel(Trigger):
    """AfterAny / AfterAll: sub-triggers side by side, each in its own state namespace."""

    __slots__ = ("triggers",)

    @staticmethod
    def _combine(results: Iterable[Any]) -> bool:
        return any(results)

    def __init__(self, *triggers: Trigger) -> None:
        if not triggers:
            raise ValueError(f"{type(self).__name__} needs at least one sub-trigger")
        for i, t in enumerate(triggers):
            _check_trigger(t, f"{type(self).__name__} sub-trigger {i}")
        self.triggers: tuple[Trigger, ...] = tuple(triggers)

    def __eq__(self, other: object) -> bool:
        return (
            type(self) is type(other)
            and isinstance(other, _Parallel)
            and self.triggers == other.triggers
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.triggers))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.triggers))})"

    def on_element(self, window: Win, ctx: TriggerContext, n: int = 1) -> None:
        for i, t in enumerate(self.triggers):
            t.on_element(window, ctx.nested(f"{i}/"), n)

    def on_merge(self, merged: list[Win], result: Win, ctx: TriggerContext) -> None:
        for i, t in enumerate(self.triggers):
            t.on_merge(merged, result, ctx.nested(f"{i}/"))

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        # a generator, so any/all short-circuit exactly as in Beam
        return self._combine(
            t.should_fire(domain, watermark, window, ctx.nested(f"{i}/"))
            for i, t in enumerate(self.triggers)
        )

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        finished = []
        for i, t in enumerate(self.triggers):
            sub = ctx.nested(f"{i}/")
            if t.should_fire(WATERMARK, watermark, window, sub):
                finished.append(t.on_fire(watermark, window, sub))
        return self._combine(finished)

    def reset(self, window: Win, ctx: TriggerContext) -> None:
        for i, t in enumerate(self.triggers):
            t.reset(window, ctx.nested(f"{i}/"))

    def has_ontime_pane(self) -> bool:
        return any(t.has_ontime_pane() for t in self.triggers)

    def may_finish(self, allowed_lateness: int) -> bool:
        return self._combine(t.may_finish(allowed_lateness) for t in self.triggers)


class AfterAny(_Parallel):
    """Fire when any sub-trigger fires; finish when any finishes."""

    __slots__ = ()


class AfterAll(_Parallel):
    """Fire when all sub-triggers would fire; finish when all finish."""

    __slots__ = ()

    @staticmethod
    def _combine(results: Iterable[Any]) -> bool:
        return all(results)


class OrFinally(AfterAny):
    """``main`` until ``finally_`` fires; Beam runs it as ``AfterAny(main, finally_)``."""

    __slots__ = ()

    def __init__(self, main: Trigger, finally_: Trigger) -> None:
        super().__init__(main, finally_)


class AfterEach(Trigger):
    """Run the sub-triggers one after the other, each until it finishes."""

    __slots__ = ("triggers",)

    def __init__(self, *triggers: Trigger) -> None:
        if not triggers:
            raise ValueError("AfterEach needs at least one sub-trigger")
        for i, t in enumerate(triggers):
            _check_trigger(t, f"AfterEach sub-trigger {i}")
        self.triggers: tuple[Trigger, ...] = tuple(triggers)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AfterEach) and self.triggers == other.triggers

    def __hash__(self) -> int:
        return hash(("AfterEach", self.triggers))

    def __repr__(self) -> str:
        return f"AfterEach({', '.join(map(repr, self.triggers))})"

    def on_element(self, window: Win, ctx: TriggerContext, n: int = 1) -> None:
        ix = ctx.get("index")
        if ix < len(self.triggers):
            self.triggers[ix].on_element(window, ctx.nested(f"{ix}/"), n)

    def on_merge(self, merged: list[Win], result: Win, ctx: TriggerContext) -> None:
        ix = ctx.get("index")
        if ix < len(self.triggers):
            self.triggers[ix].on_merge(merged, result, ctx.nested(f"{ix}/"))

    def should_fire(
        self, domain: TimeDomain, watermark: int, window: Win, ctx: TriggerContext
    ) -> bool:
        ix = ctx.get("index")
        if ix < len(self.triggers):
            return self.triggers[ix].should_fire(domain, watermark, window, ctx.nested(f"{ix}/"))
        return False

    def on_fire(self, watermark: int, window: Win, ctx: TriggerContext) -> bool:
        ix = ctx.get("index")
        if ix < len(self.triggers):
            if self.triggers[ix].on_fire(watermark, window, ctx.nested(f"{ix}/")):
                ix += 1
                ctx.add("index", ix)
            return ix == len(self.triggers)
        return False

    def reset(self, window: Win, ctx: TriggerContext) -> None:
        ctx.clear("index")
        for i, t in enumerate(self.triggers):
            t.reset(window, ctx.nested(f"{i}/"))

    def has_ontime_pane(self) -> bool:
        return any(t.has_ontime_pane() for t in self.triggers)

    def may_finish(self, allowed_lateness: int) -> bool:
        return all(t.may_finish(allowed_lateness) for t in self.triggers)


def _check_trigger(trigger: object, what: str) -> None:
    if not isinstance(trigger, Trigger):
        raise TypeError(f"{what} must be a theory.windowing.triggers trigger, got {trigger!r}")


__all__ = [
    "REAL_TIME",
    "WATERMARK",
    "AfterAll",
    "AfterAny",
    "AfterCount",
    "AfterEach",
    "AfterProcessingTime",
    "AfterWatermark",
    "Always",
    "DefaultTrigger",
    "Never",
    "OrFinally",
    "Repeatedly",
    "TimeDomain",
    "Trigger",
    "TriggerContext",
    "Win",
    "combine_tag",
]
