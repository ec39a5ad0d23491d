"""The base/tracking Pub/Sub watermark estimator against the real Pub/Sub API.

:class:`theory.dataflow.pubsub.TrackingEstimator` holds the rule (docs/semantics.md,
"Dataflow"). This module feeds it from Google Cloud Pub/Sub through the
``google-cloud-pubsub`` client (or the emulator, via ``PUBSUB_EMULATOR_HOST``) and exposes
it to Beam as a ``WatermarkEstimatorProvider``. All times are int µs since the epoch.

Wiring (one topic, two subscriptions)::

    tracking sub --pull--> TrackingReader --on_tracked--> TrackingEstimator
                                 |  record, snapshot, THEN ack
                                 +--expect(record id, publish time)--+
                                                                     v
    base sub ----pull--> BaseConsumer --on_received / on_acked--> AckLedger (a BaseBacklog)
                                                                     |
    TrackingReader.estimate(): now = clock(), pt_base = backlog.oldest_unacked_publish_time()

- **Event time** comes from the attribute named like Beam's ``timestamp_attribute``:
  milliseconds since the epoch (an optionally signed integer) or RFC 3339
  (``2015-10-29T23:41:41.123Z``, any offset, digits below the µs truncated as Dataflow
  does). A missing, empty, unparseable or out-of-range attribute is counted under its
  reason (:data:`EVENT_TIME_ERRORS`) in ``attribute_errors``. Such a message is acked
  by the tracking reader and never fed to the estimator; it is never a crash and never a
  silent zero.
- **Record ids**: with ``id_label`` (Beam's attribute for publisher-side deduplication)
  a record is keyed by that attribute, otherwise by the Pub/Sub message id. A republished
  copy (publisher retry) then resolves the same ledger entry.
- **Snapshot before ack**: :meth:`TrackingReader.poll` records a pulled batch, hands
  ``state()`` to ``snapshot_sink`` and only then acks. A crash before the snapshot leaves
  the batch unacked (Pub/Sub redelivers it); a crash after it loses nothing.
  :meth:`TrackingReader.estimate` also snapshots before it returns a new watermark, so a
  restart never moves the watermark back.
- **Lease grace**: messages pulled by a reader that died before recording them are
  invisible until their ack deadline expires, so a reader holds its watermark
  (:data:`REASON_LEASE_GRACE`) for ``lease_grace`` after it starts; set it to the tracking
  subscription's ack deadline (0 only when no predecessor could hold leases).
- **Tracking backlog** is "not drained": true until a pull comes back empty, and again
  after any failed pull. The reader pulls with ``return_immediately`` (deprecated by
  Google but honoured by the emulator and the service); on the real service an empty
  answer can come back while messages wait, so production deployments may add Cloud
  Monitoring's ``subscription/num_undelivered_messages`` of the tracking subscription.
- **Clocks** are injectable (``clock()`` returns µs): :func:`system_clock` in production,
  :class:`OffsetClock` in tests that skip minutes of silence without sleeping.

**The base backlog in production.** :class:`AckLedger` is exact only for a base consumer
we run ourselves. When the base subscription is read by someone else (Dataflow, another
service), use :class:`MonitoredBaseBacklog` over Cloud Monitoring's
``pubsub.googleapis.com/subscription/oldest_unacked_message_age`` (seconds, sampled every
60 s and delayed by minutes). A sample at ``T`` with age ``a`` gives ``pt_base(T) = T -
a``, and ``pt_base`` never decreases (acked messages stay acked, new ones are newer), so a
stale sample is a *lower* bound of the current ``pt_base``: safe, only later. Supply the
fetch function with ``google-cloud-monitoring`` (not a dependency here, and never called
from the tests)::

    from google.cloud import monitoring_v3

    client = monitoring_v3.MetricServiceClient()

    def fetch() -> BacklogSample | None:
        now = int(time.time())
        series = client.list_time_series(request={
            "name": f"projects/{project}",
            "filter": 'metric.type = "pubsub.googleapis.com/subscription/'
                      'oldest_unacked_message_age" AND '
                      f'resource.labels.subscription_id = "{base_subscription_id}"',
            "interval": {"start_time": {"seconds": now - 600},
                         "end_time": {"seconds": now}},
            "view": monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
        })
        for ts in series:                      # points come newest first
            p = ts.points[0]
            return BacklogSample(from_datetime(p.interval.end_time),
                                 p.value.int64_value * SECOND)
        return None

    reader = TrackingReader(subscriber, tracking_path, backlog=MonitoredBaseBacklog(fetch),
                            timestamp_attribute="ts")

The same estimator is a Beam ``WatermarkEstimatorProvider``
(:class:`TrackingWatermarkEstimatorProvider`); :mod:`beam_pipelines.pubsub_sdf` has a
splittable DoFn that reads the two subscriptions with it.
"""

from __future__ import annotations

import datetime as _dt
import functools
import heapq
import re
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from apache_beam.io.iobase import WatermarkEstimator
from apache_beam.transforms.core import WatermarkEstimatorProvider
from apache_beam.utils.timestamp import Timestamp
from google.api_core import exceptions as gexc

from theory.columns import as_int, check_duration, check_timestamp
from theory.dataflow.pubsub import Estimate, TrackingEstimator
from theory.time import (
    MAX_TIMESTAMP,
    MICROS_PER_MILLI,
    MIN_TIMESTAMP,
    MINUTE,
    SECOND,
    from_datetime,
)

__all__ = [
    "ERROR_EMPTY",
    "ERROR_MISSING",
    "ERROR_OUT_OF_RANGE",
    "ERROR_UNPARSEABLE",
    "EVENT_TIME_ERRORS",
    "REASON_LEASE_GRACE",
    "AckLedger",
    "BacklogSample",
    "BaseBacklog",
    "BaseConsumer",
    "EventTimeError",
    "MonitoredBaseBacklog",
    "OffsetClock",
    "OwedAcks",
    "PubsubRecord",
    "TrackingReader",
    "TrackingWatermarkEstimator",
    "TrackingWatermarkEstimatorProvider",
    "decode_message",
    "parse_event_time",
    "system_clock",
]

Clock = Callable[[], int]

ERROR_MISSING: Final[str] = "missing"
ERROR_EMPTY: Final[str] = "empty"
ERROR_UNPARSEABLE: Final[str] = "unparseable"
ERROR_OUT_OF_RANGE: Final[str] = "out of range"
#: The reasons under which a bad event-time attribute is counted.
EVENT_TIME_ERRORS: Final[tuple[str, ...]] = (
    ERROR_MISSING,
    ERROR_EMPTY,
    ERROR_UNPARSEABLE,
    ERROR_OUT_OF_RANGE,
)
#: The reader's reason while it waits out the leases of a reader that died before it.
REASON_LEASE_GRACE: Final[str] = "held: lease grace after a (re)start"

_STATE_VERSION: Final[int] = 1


# --------------------------------------------------------------------------- clocks


def system_clock() -> int:
    """Wall-clock time in µs (the default clock)."""
    return time.time_ns() // 1_000


class OffsetClock:
    """Wall-clock time plus a settable offset (µs): a test clock that keeps in step with
    the publish times Pub/Sub stamps and can skip ahead (:meth:`advance`) without sleeping.
    A negative offset is a reader's clock behind Pub/Sub's (clock skew). Picklable, so a
    Beam DoFn can carry it (the offset is copied at pickling)."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = as_int(offset, "offset")

    def __call__(self) -> int:
        return system_clock() + self.offset

    def advance(self, duration: int) -> None:
        """Move the clock ``duration`` µs (>= 0) further ahead of the wall clock."""
        self.offset += check_duration(duration, "duration")


# --------------------------------------------------------------------------- event time


class EventTimeError(ValueError):
    """A bad event-time attribute; ``reason`` is one of :data:`EVENT_TIME_ERRORS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


_MILLIS_RE: Final = re.compile(r"[+-]?[0-9]+")
_RFC3339_RE: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)


def parse_event_time(value: str | None) -> int:
    """An event-time attribute value to µs, as Beam reads ``timestamp_attribute``.

    Milliseconds since the epoch (``"1700000000123"``, optionally signed) or RFC 3339
    (``"2023-11-14T22:13:20.123456Z"``, ``"...+02:00"``; more than 6 fraction digits are
    truncated to the µs, more than 9 rejected, as Beam does). Raises
    :class:`EventTimeError` with the reason: ``missing`` (None), ``empty``,
    ``unparseable`` or ``out of range`` (outside Beam's MIN/MAX_TIMESTAMP).
    """
    if value is None:
        raise EventTimeError(ERROR_MISSING, "no event-time attribute")
    text = value.strip()
    if not text:
        raise EventTimeError(ERROR_EMPTY, "empty event-time attribute")
    if _MILLIS_RE.fullmatch(text):
        micros = int(text) * MICROS_PER_MILLI
    else:
        m = _RFC3339_RE.fullmatch(text)
        if m is None:
            raise EventTimeError(
                ERROR_UNPARSEABLE, f"{value!r} is neither milliseconds nor RFC 3339"
            )
        year, month, day, hour, minute, sec = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
        frac = m.group(7) or ""
        if len(frac) > 9:
            raise EventTimeError(ERROR_UNPARSEABLE, f"{value!r}: fraction beyond nanoseconds")
        try:
            naive = _dt.datetime(year, month, day, hour, minute, sec)
        except ValueError as err:
            raise EventTimeError(ERROR_UNPARSEABLE, f"{value!r}: {err}") from None
        offset = 0
        if m.group(8) is None:
            oh, om = int(m.group(10)), int(m.group(11))
            if oh > 23 or om > 59:
                raise EventTimeError(ERROR_UNPARSEABLE, f"{value!r}: bad UTC offset")
            offset = (oh * 60 + om) * MINUTE * (-1 if m.group(9) == "-" else 1)
        micros = from_datetime(naive) + int((frac + "000000")[:6]) - offset
    if not MIN_TIMESTAMP <= micros <= MAX_TIMESTAMP:
        raise EventTimeError(ERROR_OUT_OF_RANGE, f"{value!r} is outside Beam's timestamps")
    return micros


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class PubsubRecord:
    """One received message (µs). ``event_time`` is None exactly when ``error`` names
    the event-time problem."""

    record_id: str
    message_id: str
    publish_time: int
    event_time: int | None
    error: str | None
    ack_id: str
    data: bytes
    attributes: Mapping[str, str]
    delivery_attempt: int = 0


def decode_message(
    received: Any, timestamp_attribute: str, id_label: str | None = None
) -> PubsubRecord:
    """A ``ReceivedMessage`` (google-cloud-pubsub) as a :class:`PubsubRecord`."""
    msg = received.message
    attrs = dict(msg.attributes)
    error: str | None = None
    event_time: int | None = None
    try:
        event_time = parse_event_time(attrs.get(timestamp_attribute))
    except EventTimeError as err:
        error = err.reason
    record_id = msg.message_id
    if id_label is not None and attrs.get(id_label):
        record_id = attrs[id_label]
    return PubsubRecord(
        record_id=record_id,
        message_id=msg.message_id,
        publish_time=from_datetime(msg.publish_time),
        event_time=event_time,
        error=error,
        ack_id=received.ack_id,
        data=bytes(msg.data),
        attributes=attrs,
        delivery_attempt=int(getattr(received, "delivery_attempt", 0) or 0),
    )


class SubscriberLike(Protocol):
    """The part of ``google.cloud.pubsub_v1.SubscriberClient`` used here."""

    def pull(self, *args: Any, **kwargs: Any) -> Any: ...

    def acknowledge(self, *args: Any, **kwargs: Any) -> Any: ...

    def modify_ack_deadline(self, *args: Any, **kwargs: Any) -> Any: ...


class _Puller:
    """Pull/ack/nack with errors counted by RPC and exception name, never raised."""

    def __init__(
        self,
        subscriber: SubscriberLike,
        subscription: str,
        *,
        timestamp_attribute: str,
        id_label: str | None,
        max_messages: int,
        rpc_timeout: float,
        return_immediately: bool,
    ) -> None:
        if not timestamp_attribute:
            raise ValueError("timestamp_attribute must name a message attribute")
        self.subscriber = subscriber
        self.subscription = subscription
        self.timestamp_attribute = timestamp_attribute
        self.id_label = id_label
        self.max_messages = check_duration(max_messages, "max_messages", allow_zero=False)
        if rpc_timeout <= 0:
            raise ValueError(f"rpc_timeout must be > 0 s, got {rpc_timeout}")
        self.rpc_timeout = float(rpc_timeout)
        self.return_immediately = bool(return_immediately)
        #: Bad event-time attributes, by reason.
        self.attribute_errors: Counter[str] = Counter()
        #: Failed RPCs, as ``"<rpc>: <exception>"``.
        self.rpc_errors: Counter[str] = Counter()

    def _pull(self) -> list[PubsubRecord] | None:
        """A batch ([] when empty), or None when the pull failed."""
        request = {
            "subscription": self.subscription,
            "max_messages": self.max_messages,
            "return_immediately": self.return_immediately,
        }
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The return_immediately", DeprecationWarning)
                resp = self.subscriber.pull(request=request, timeout=self.rpc_timeout, retry=None)
        except gexc.DeadlineExceeded:
            return []  # a long poll that found nothing
        except gexc.GoogleAPIError as err:
            self.rpc_errors[f"pull: {type(err).__name__}"] += 1
            return None
        out = [
            decode_message(r, self.timestamp_attribute, self.id_label)
            for r in resp.received_messages
        ]
        for rec in out:
            if rec.error is not None:
                self.attribute_errors[rec.error] += 1
        return out

    def _ack(self, records: Sequence[PubsubRecord]) -> bool:
        return self._ack_ids([r.ack_id for r in records])

    def _ack_ids(self, ack_ids: Sequence[str]) -> bool:
        if not ack_ids:
            return True
        try:
            self.subscriber.acknowledge(
                request={"subscription": self.subscription, "ack_ids": list(ack_ids)},
                timeout=self.rpc_timeout,
                retry=None,
            )
        except gexc.GoogleAPIError as err:
            self.rpc_errors[f"acknowledge: {type(err).__name__}"] += 1
            return False
        return True

    def extend_leases(self, records: Sequence[PubsubRecord], seconds: int) -> bool:
        """Keep ``records`` leased for ``seconds`` from now (``modify_ack_deadline``):
        their acks wait for a runner's commit (a failure is counted)."""
        return self._modify(records, seconds)

    def _modify(self, records: Sequence[PubsubRecord], seconds: int) -> bool:
        if not records:
            return True
        try:
            self.subscriber.modify_ack_deadline(
                request={
                    "subscription": self.subscription,
                    "ack_ids": [r.ack_id for r in records],
                    "ack_deadline_seconds": seconds,
                },
                timeout=self.rpc_timeout,
                retry=None,
            )
        except gexc.GoogleAPIError as err:
            self.rpc_errors[f"modify_ack_deadline: {type(err).__name__}"] += 1
            return False
        return True


# --------------------------------------------------------------------------- base backlog


class BaseBacklog(Protocol):
    """Where the estimator gets ``pt_base``."""

    def oldest_unacked_publish_time(self) -> int | None:
        """The base subscription's oldest unacked publish time (µs); None when nothing
        is unacked. Safe only if never above the true value."""
        ...


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``method`` under its instance's ``_lock``."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return run


class AckLedger:
    """``pt_base`` from our own base consumer's acks, joined with what tracking has seen.

    A record is *outstanding* once the tracking reader has seen it (:meth:`expect`) or
    the base consumer has received it (:meth:`on_received`), until the base consumer's ack
    of it succeeds (:meth:`on_acked`). ``pt_base`` is the minimum publish time over the
    outstanding records (for a republished record, its earliest copy). Messages neither
    seen nor received are newer than the tracking reader's view, which is the estimator's
    own assumption (its band and the tracking backlog flag cover them).

    Acked ids are remembered for ``acked_memory`` µs of publish time behind the newest
    publish time seen, so a tracking reader that sees a record after the base acked it
    does not resurrect it. An :meth:`expect` older than that horizon and not outstanding
    is ignored and counted (``counters["stale expect"]``): it assumes the tracking reader
    never lags the base's acks by more than ``acked_memory``. :meth:`on_received` always
    counts (the base really holds it). Memory: outstanding records plus the acked ids
    within the horizon. Thread-safe: a runner may take the estimator state holding it
    (:meth:`state`) from another thread while the reader feeds it.
    """

    def __init__(self, acked_memory: int = 10 * MINUTE) -> None:
        self._lock = threading.RLock()
        self.acked_memory = check_duration(acked_memory, "acked_memory")
        self._outstanding: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []  # lazy (publish time, record id)
        self._acked: dict[str, int] = {}
        self._acked_heap: list[tuple[int, str]] = []
        self._newest: int | None = None
        #: ``expected``, ``received``, ``acked``, ``already acked``, ``stale expect``.
        self.counters: Counter[str] = Counter()

    def _add(self, record_id: str, publish_time: int) -> None:
        old = self._outstanding.get(record_id)
        if old is None or publish_time < old:
            self._outstanding[record_id] = publish_time
            heapq.heappush(self._heap, (publish_time, record_id))
        if self._newest is None or publish_time > self._newest:
            self._newest = publish_time

    def _horizon(self) -> int | None:
        return None if self._newest is None else self._newest - self.acked_memory

    @_locked
    def expect(self, record_id: str, publish_time: int) -> None:
        """The tracking reader saw this record: the base owes it until it is acked."""
        pt = check_timestamp(publish_time, "publish_time")
        self.counters["expected"] += 1
        if record_id in self._acked:
            self.counters["already acked"] += 1
            return
        horizon = self._horizon()
        if record_id not in self._outstanding and horizon is not None and pt < horizon:
            self.counters["stale expect"] += 1
            return
        self._add(record_id, pt)

    @_locked
    def on_received(self, record_id: str, publish_time: int) -> None:
        """The base consumer received this record (also a redelivery or a duplicate)."""
        pt = check_timestamp(publish_time, "publish_time")
        self.counters["received"] += 1
        self._acked.pop(record_id, None)
        self._add(record_id, pt)

    @_locked
    def on_acked(self, acked: Iterable[tuple[str, int]]) -> None:
        """The base consumer's ack of these ``(record id, publish time)`` succeeded."""
        for rid, publish_time in acked:
            pt = check_timestamp(publish_time, "publish_time")
            self.counters["acked"] += 1
            self._outstanding.pop(rid, None)
            if self._newest is None or pt > self._newest:
                self._newest = pt
            self._acked[rid] = pt
            heapq.heappush(self._acked_heap, (pt, rid))
        if len(self._heap) > 2 * len(self._outstanding) + 64:  # drop stale heap entries
            self._heap = [(pt, rid) for rid, pt in self._outstanding.items()]
            heapq.heapify(self._heap)
        horizon = self._horizon()
        if horizon is not None:
            heap = self._acked_heap
            while heap and heap[0][0] < horizon:
                pt, rid = heapq.heappop(heap)
                if self._acked.get(rid) == pt:
                    del self._acked[rid]

    @_locked
    def oldest_unacked_publish_time(self) -> int | None:
        """``pt_base`` (µs), None when nothing is outstanding."""
        heap = self._heap
        while heap and self._outstanding.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    @property
    def outstanding(self) -> int:
        """Records the base still owes."""
        return len(self._outstanding)

    @_locked
    def state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot."""
        return {
            "version": _STATE_VERSION,
            "acked_memory": self.acked_memory,
            "outstanding": sorted(self._outstanding.items()),
            "acked": sorted(self._acked.items()),
            "newest": self._newest,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> AckLedger:
        """Rebuild from :meth:`state`."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"ledger state: expected version {_STATE_VERSION}")
        led = cls(state["acked_memory"])
        for rid, pt in state["outstanding"]:
            led._add(str(rid), check_timestamp(pt, "outstanding publish time"))
        for rid, pt in state["acked"]:
            led._acked[str(rid)] = check_timestamp(pt, "acked publish time")
            heapq.heappush(led._acked_heap, (pt, str(rid)))
        newest = state["newest"]
        led._newest = None if newest is None else check_timestamp(newest, "newest")
        return led


@dataclass(frozen=True)
class BacklogSample:
    """One Cloud Monitoring point: its end time and ``oldest_unacked_message_age`` (µs)."""

    sample_time: int
    oldest_unacked_age: int


class MonitoredBaseBacklog:
    """``pt_base`` from Cloud Monitoring's ``subscription/oldest_unacked_message_age``.

    ``fetch`` returns the newest :class:`BacklogSample` (or None); see the module
    docstring for one written with ``google-cloud-monitoring``. Each sample is a lower
    bound of the current ``pt_base`` (``sample_time - age - slack``; ``slack``, 1 s by
    default, covers the metric's whole-second rounding), so the answer is the maximum
    over the samples seen. It is never None: an empty backlog at ``T`` still says that
    anything published after ``T`` may be unacked. A failed fetch is counted
    (``errors``) and the last answer kept; before any sample it is ``MIN_TIMESTAMP``
    (the estimator then keeps its whole history in the band).
    """

    def __init__(self, fetch: Callable[[], BacklogSample | None], *, slack: int = SECOND) -> None:
        self.fetch = fetch
        self.slack = check_duration(slack, "slack")
        self._value = MIN_TIMESTAMP
        self.errors: Counter[str] = Counter()

    def oldest_unacked_publish_time(self) -> int | None:
        try:
            sample = self.fetch()
        except Exception as err:  # any monitoring failure: keep the last lower bound
            self.errors[type(err).__name__] += 1
            return self._value
        if sample is not None:
            t = check_timestamp(sample.sample_time, "sample_time")
            age = check_duration(sample.oldest_unacked_age, "oldest_unacked_age")
            self._value = max(self._value, t - age - self.slack, MIN_TIMESTAMP)
        return self._value


# --------------------------------------------------------------------------- readers


class TrackingReader(_Puller):
    """Pulls the tracking subscription into a :class:`~theory.dataflow.pubsub.TrackingEstimator`.

    ``backlog`` gives ``pt_base``; ``ledger`` (optional, usually the same
    :class:`AckLedger`) is told every record seen. ``snapshot_sink`` (optional) receives
    :meth:`state` after each recorded batch and before its ack: persist it, and restart
    with :meth:`from_snapshot`. Parameters in µs except ``rpc_timeout`` (s); see the
    module docstring for ``lease_grace`` and the backlog signal.
    """

    def __init__(
        self,
        subscriber: SubscriberLike,
        subscription: str,
        *,
        backlog: BaseBacklog,
        timestamp_attribute: str,
        estimator: TrackingEstimator | None = None,
        ledger: AckLedger | None = None,
        id_label: str | None = None,
        clock: Clock = system_clock,
        snapshot_sink: Callable[[dict[str, Any]], None] | None = None,
        lease_grace: int = 10 * SECOND,
        max_messages: int = 1000,
        max_pulls: int = 100,
        rpc_timeout: float = 10.0,
        return_immediately: bool = True,
    ) -> None:
        super().__init__(
            subscriber,
            subscription,
            timestamp_attribute=timestamp_attribute,
            id_label=id_label,
            max_messages=max_messages,
            rpc_timeout=rpc_timeout,
            return_immediately=return_immediately,
        )
        self.estimator = estimator if estimator is not None else TrackingEstimator()
        self.backlog = backlog
        self.ledger = ledger
        self.clock = clock
        self.snapshot_sink = snapshot_sink
        self.lease_grace = check_duration(lease_grace, "lease_grace")
        self.max_pulls = check_duration(max_pulls, "max_pulls", allow_zero=False)
        self._grace_until = check_timestamp(clock(), "clock()") + self.lease_grace
        self._drained = False
        self.last_estimate: Estimate | None = None

    @classmethod
    def from_snapshot(
        cls,
        snapshot: Mapping[str, Any],
        subscriber: SubscriberLike,
        subscription: str,
        **kwargs: Any,
    ) -> TrackingReader:
        """A reader resuming from :meth:`state` (same keyword arguments as the class)."""
        if snapshot.get("version") != _STATE_VERSION:
            raise ValueError(f"reader snapshot: expected version {_STATE_VERSION}")
        est = TrackingEstimator.from_state(dict(snapshot["estimator"]))
        reader = cls(subscriber, subscription, estimator=est, **kwargs)
        reader.attribute_errors.update(snapshot.get("attribute_errors", {}))
        return reader

    def state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot: the estimator and the error counts."""
        return {
            "version": _STATE_VERSION,
            "estimator": self.estimator.state(),
            "attribute_errors": dict(self.attribute_errors),
        }

    # The three steps of a poll, public so a caller (or a test) can interleave them.

    def pull(self) -> list[PubsubRecord] | None:
        """One pull: a batch ([] when the subscription looks drained), None on failure."""
        batch = self._pull()
        self._drained = batch == []
        return batch

    def record(self, batch: Sequence[PubsubRecord]) -> int:
        """Feed a batch to the estimator and ledger, then the snapshot sink. Returns the
        records with a valid event time."""
        good = 0
        for rec in batch:
            if rec.event_time is None:
                continue
            self.estimator.on_tracked(rec.publish_time, rec.event_time)
            if self.ledger is not None:
                self.ledger.expect(rec.record_id, rec.publish_time)
            good += 1
        if batch:
            self._drained = False
            if self.snapshot_sink is not None:
                self.snapshot_sink(self.state())
        return good

    def ack(self, batch: Sequence[PubsubRecord]) -> bool:
        """Ack a recorded batch (a failure is counted; Pub/Sub redelivers: harmless)."""
        return self._ack(batch)

    def ack_ids(self, ack_ids: Sequence[str]) -> bool:
        """Ack by ack id (records an earlier attempt recorded and owed, :class:`OwedAcks`)."""
        return self._ack_ids(ack_ids)

    def poll(self) -> int:
        """Pull, record, snapshot and ack until a pull comes back empty (at most
        ``max_pulls`` pulls). Returns the records tracked."""
        total = 0
        for _ in range(self.max_pulls):
            batch = self.pull()
            if not batch:
                break
            total += self.record(batch)
            self.ack(batch)
        return total

    def tracking_has_backlog(self) -> bool:
        """True unless the last pull came back empty with nothing recorded since."""
        return not self._drained

    def estimate(self) -> Estimate:
        """The estimate now: the estimator's rule, or held during the lease grace. The
        state goes to ``snapshot_sink`` before the estimate is returned, so a watermark
        is durable before anyone sees it (a restart never moves it back)."""
        now = check_timestamp(self.clock(), "clock()")
        if now < self._grace_until:
            e = Estimate(self.estimator.watermark, REASON_LEASE_GRACE)
        else:
            base = self.backlog.oldest_unacked_publish_time()
            e = self.estimator.estimate(now, base, self.tracking_has_backlog())
            if self.snapshot_sink is not None:
                self.snapshot_sink(self.state())
        self.last_estimate = e
        return e


class BaseConsumer(_Puller):
    """Our own reader of the base subscription, keeping an :class:`AckLedger`.

    :meth:`pull` returns records (bad event times included, counted, for the caller to
    dead-letter and ack); every record with an event time goes to the ledger as received.
    :meth:`ack` tells the ledger only after the ack RPC succeeded; :meth:`nack` asks for
    redelivery (``modify_ack_deadline``). ``redeliveries`` counts pulls of a message
    this consumer already holds unacked.
    """

    def __init__(
        self,
        subscriber: SubscriberLike,
        subscription: str,
        *,
        timestamp_attribute: str,
        ledger: AckLedger | None = None,
        id_label: str | None = None,
        max_messages: int = 100,
        rpc_timeout: float = 10.0,
        return_immediately: bool = True,
    ) -> None:
        super().__init__(
            subscriber,
            subscription,
            timestamp_attribute=timestamp_attribute,
            id_label=id_label,
            max_messages=max_messages,
            rpc_timeout=rpc_timeout,
            return_immediately=return_immediately,
        )
        self.ledger = ledger if ledger is not None else AckLedger()
        self._held: set[str] = set()
        self.redeliveries = 0

    def pull(self) -> list[PubsubRecord] | None:
        """One pull ([] when empty, None on failure)."""
        batch = self._pull()
        for rec in batch or ():
            if rec.message_id in self._held:
                self.redeliveries += 1
            self._held.add(rec.message_id)
            if rec.event_time is not None:
                self.ledger.on_received(rec.record_id, rec.publish_time)
        return batch

    def ack(self, records: Sequence[PubsubRecord]) -> bool:
        """Ack; on success the ledger drops the records."""
        if not self._ack(records):
            return False
        for rec in records:
            self._held.discard(rec.message_id)
        self.ledger.on_acked(
            (r.record_id, r.publish_time) for r in records if r.event_time is not None
        )
        return True

    def consumed(self, records: Sequence[PubsubRecord]) -> None:
        """The records' output is committed together with the ledger's state (a Beam
        bundle's output and its estimator state): the ledger drops them now, and the acks
        follow (:meth:`ack`, :meth:`ack_owed`). If the commit fails, that state is
        discarded with the output and the messages come back."""
        self.ledger.on_acked(
            (r.record_id, r.publish_time) for r in records if r.event_time is not None
        )

    def ack_owed(self, owed: Sequence[tuple[str, str, int, bool]]) -> bool:
        """Ack what an earlier attempt owed (:attr:`OwedAcks.base`) and drop those records
        from the ledger even if the ack fails: that attempt's finalizer has most likely
        acked them, and a message the service still holds is redelivered and received
        again (at least once)."""
        ok = self._ack_ids([ack for ack, _, _, _ in owed])
        self.ledger.on_acked((rid, pt) for _, rid, pt, timed in owed if timed)
        return ok

    def nack(self, records: Sequence[PubsubRecord], ack_deadline_seconds: int = 0) -> bool:
        """Set the records' lease to ``ack_deadline_seconds`` (0: redeliver now)."""
        return self._modify(records, ack_deadline_seconds)


# --------------------------------------------------------------------------- Beam


#: The version of :class:`TrackingWatermarkEstimator`'s state (2: the ledger, the acks
#: owed and the last record's time travel with it).
_ESTIMATOR_STATE_VERSION: Final[int] = 2


@dataclass(frozen=True, slots=True)
class OwedAcks:
    """The acks an attempt registered with its bundle finalizer, kept in its estimator
    state: ``tracking`` ack ids, and ``base`` records as ``(ack id, record id, publish
    time µs, has an event time)``. Whoever resumes that state may (re)send them: its
    output is committed, since a runner resumes committed states only."""

    tracking: tuple[str, ...] = ()
    base: tuple[tuple[str, str, int, bool], ...] = ()


class TrackingWatermarkEstimator(WatermarkEstimator):
    """A Beam ``WatermarkEstimator`` reporting the tracking estimate.

    The reader feeds it (:meth:`on_tracked`, :meth:`update`); Beam calls
    :meth:`observe_timestamp` with the timestamp of every element the reader emits, which
    is counted, and counted as late when below the watermark already reported (so
    ``late_observed`` measures the estimate's mistakes). :meth:`current_watermark` is the
    latched estimate.

    The state is a plain dict (Beam's default coder): the estimator's snapshot, the counts,
    ``hold_until`` (see :meth:`hold_until_at_least`), the reader's :class:`AckLedger`
    (``pt_base`` of the base subscription), the :class:`OwedAcks` of the attempt that wrote
    it, the processing time of the last base record (µs, or None) and this instance's
    ``token``, a fresh id per estimator instance (one processing attempt). After a restore,
    ``resumed_from`` is the token of the attempt whose state it was, so a reader can tell a
    clean resume from a retry (see :mod:`beam_pipelines.pubsub_sdf`). Everything a reader
    keeps between bundles is here, so any worker can resume any state.
    """

    def __init__(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != _ESTIMATOR_STATE_VERSION:
            raise ValueError(
                f"watermark estimator state: expected version {_ESTIMATOR_STATE_VERSION}, "
                f"got {state.get('version')!r}"
            )
        try:
            self.estimator = TrackingEstimator.from_state(dict(state["estimator"]))
            self.observed = check_duration(state["observed"], "state['observed']")
            self.late_observed = check_duration(state["late_observed"], "state['late_observed']")
            self.hold_until = check_timestamp(state["hold_until"], "state['hold_until']")
            self._ledger = AckLedger.from_state(state["ledger"])
            tracking, base = state["owed"]
            self._owed = OwedAcks(
                tuple(str(a) for a in tracking),
                tuple((str(a), str(r), int(pt), bool(t)) for a, r, pt, t in base),
            )
            last = state["last_record"]
        except KeyError as err:
            raise ValueError(f"watermark estimator state: missing key {err.args[0]!r}") from None
        self._last_record = None if last is None else check_timestamp(last, "state['last_record']")
        self.resumed_from: str | None = state.get("token")
        self.token = uuid.uuid4().hex
        self._owing: dict[str, list[Any]] = {"tracking": [], "base": []}
        self.last_estimate: Estimate | None = None

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        self.observed += 1
        if timestamp.micros < self.estimator.watermark:
            self.late_observed += 1

    def current_watermark(self) -> Timestamp:
        return Timestamp(micros=self.estimator.watermark)

    def get_estimator_state(self) -> dict[str, Any]:
        return {
            "version": _ESTIMATOR_STATE_VERSION,
            "estimator": self.estimator.state(),
            "observed": self.observed,
            "late_observed": self.late_observed,
            "hold_until": self.hold_until,
            "ledger": self._ledger.state(),
            "owed": (list(self._owing["tracking"]), list(self._owing["base"])),
            "last_record": self._last_record,
            "token": self.token,
        }

    # Beam hands a DoFn this estimator inside a ThreadsafeWatermarkEstimator, which
    # exposes methods only (each under its lock): everything a reader needs is a method.

    def on_tracked(self, publish_time: int, event_time: int) -> None:
        """Record one tracked message (µs)."""
        self.estimator.on_tracked(publish_time, event_time)

    def record(self, records: Iterable[PubsubRecord]) -> int:
        """Record the tracked records that have an event time; returns how many."""
        n = 0
        for rec in records:
            if rec.event_time is not None:
                self.estimator.on_tracked(rec.publish_time, rec.event_time)
                n += 1
        return n

    def watermark_micros(self) -> int:
        """The latched watermark (µs)."""
        return self.estimator.watermark

    def tokens(self) -> tuple[str | None, str]:
        """``(resumed_from, token)``: the restored state's attempt and this one."""
        return self.resumed_from, self.token

    def counts(self) -> dict[str, int]:
        """``observed``, ``late_observed``, ``tracked`` and ``regressions``."""
        return {
            "observed": self.observed,
            "late_observed": self.late_observed,
            "tracked": self.estimator.tracked,
            "regressions": self.estimator.regressions,
        }

    def ledger(self) -> AckLedger:
        """The base subscription's :class:`AckLedger`, restored with the state."""
        return self._ledger

    def take_owed(self) -> OwedAcks:
        """The acks owed by the attempt that wrote the restored state (once; then empty)."""
        owed, self._owed = self._owed, OwedAcks()
        return owed

    def owe(
        self,
        tracking: Iterable[PubsubRecord] = (),
        base: Iterable[PubsubRecord] = (),
    ) -> None:
        """Note acks this attempt registered with its finalizer: they go into the state,
        for whoever resumes it (:meth:`take_owed`)."""
        self._owing["tracking"].extend(r.ack_id for r in tracking)
        self._owing["base"].extend(
            (r.ack_id, r.record_id, r.publish_time, r.event_time is not None) for r in base
        )

    def last_record(self) -> int | None:
        """Processing time (µs) of the last base record read, or None."""
        return self._last_record

    def set_last_record(self, t: int) -> None:
        """Note the processing time (µs) of a base record (or of the first start)."""
        self._last_record = check_timestamp(t, "t")

    def hold_until_at_least(self, t: int) -> None:
        """Hold the watermark until processing time ``t`` (µs): the lease grace."""
        self.hold_until = max(self.hold_until, check_timestamp(t, "t"))

    def update(
        self, now: int, base_oldest_unacked_publish_time: int | None, tracking_has_backlog: bool
    ) -> Estimate:
        """Apply the rule (:meth:`theory.dataflow.pubsub.TrackingEstimator.estimate`) at ``now``
        (µs), or hold (:data:`REASON_LEASE_GRACE`) while ``now < hold_until``."""
        if check_timestamp(now, "now") < self.hold_until:
            e = Estimate(self.estimator.watermark, REASON_LEASE_GRACE)
        else:
            e = self.estimator.estimate(now, base_oldest_unacked_publish_time, tracking_has_backlog)
        self.last_estimate = e
        return e


class TrackingWatermarkEstimatorProvider(WatermarkEstimatorProvider):
    """Makes :class:`TrackingWatermarkEstimator` s with these estimator parameters:
    :class:`theory.dataflow.pubsub.TrackingEstimator`'s (``band``, ``idle_advance_after``,
    ``idle_lag``, ``bucket_width``, ``cap_at_idle_lag``; µs), whose defaults apply, and the
    :class:`AckLedger`'s ``acked_memory`` (µs). The state's size grows with the ledger:
    the base's outstanding records plus the ids acked within ``acked_memory``."""

    def __init__(self, *, acked_memory: int = 10 * MINUTE, **estimator_params: Any) -> None:
        self.estimator_params: dict[str, Any] = dict(estimator_params)
        TrackingEstimator(**self.estimator_params)  # validate now, not on a worker
        self.acked_memory = check_duration(acked_memory, "acked_memory")

    def initial_estimator_state(self, element: Any, restriction: Any) -> dict[str, Any]:
        return {
            "version": _ESTIMATOR_STATE_VERSION,
            "estimator": TrackingEstimator(**self.estimator_params).state(),
            "observed": 0,
            "late_observed": 0,
            "hold_until": MIN_TIMESTAMP,
            "ledger": AckLedger(self.acked_memory).state(),
            "owed": ([], []),
            "last_record": None,
            "token": None,
        }

    def create_watermark_estimator(
        self, estimator_state: Mapping[str, Any]
    ) -> TrackingWatermarkEstimator:
        return TrackingWatermarkEstimator(estimator_state)
