"""A splittable DoFn reading Pub/Sub with the base/tracking watermark estimator.

:class:`ReadWithTrackingWatermarkFn` takes a :class:`PubsubReadSpec` element (a base and
a tracking subscription of one topic) and emits the base subscription's records as
``TimestampedValue(PubsubRecord, event time)``. Its watermark estimator is
:class:`~beam_pipelines.pubsub.TrackingWatermarkEstimator`, fed from the tracking
subscription; Beam checkpoints the estimator's state with the restriction.

Beam's form of "snapshot before ack": both subscriptions are acked in the bundle
finalizer, which the runner calls only after it has committed the bundle's output and the
estimator state. A failed bundle is retried from the previous state and its messages are
redelivered.

Everything the reader keeps between bundles travels in the watermark estimator's state,
so any worker can resume any residual (Spark runs a read's bundles in whichever Python
worker it picks): the estimator, the :class:`~beam_pipelines.pubsub.AckLedger` that gives
``pt_base``, the processing time of the last base record (``stop_after_idle``), and the
acks the attempt registered with its finalizer (:class:`~beam_pipelines.pubsub.OwedAcks`).
The runner resumes committed states only, so whoever resumes a state sends those acks
again (the finalizer may never run, as Beam's Java Pub/Sub source warns); Pub/Sub takes a
repeated ack as a no-op (with exactly-once delivery on, it answers an error, counted).

A runner may call the finalizer late, or never (PySparkRunner's streaming mode never calls
it: its batches commit on the driver after the tasks end, so the acks come from the next
resume). So that the messages owed do not come back before then, the bundle extends
their leases to ``owed_lease`` seconds (60 by default) as it checkpoints; a bundle whose
output is never committed gets them back once that lease ends.

The lease grace (``lease_grace``, the tracking subscription's ack deadline) holds the
watermark after any start that is not a clean resume: messages a dead attempt pulled stay
invisible until their leases expire. A resume is clean when this attempt is the first to
start from the state's token; a first start (no token) and a retry (the token already
claimed) are not. Beam's SDF API gives no attempt number, so the claim is made in a
directory every worker sees (:class:`~beam_pipelines.resume_claims.ResumeClaims`,
``claims_dir``).

By default ``pt_base`` comes from that ledger, which is exact while this reader is the
base subscription's only consumer. A base record leaves the ledger once emitted: its output
is committed with the state the ledger is in, and if that commit fails both are dropped
and the message comes back. The ledger makes the state grow with the base's outstanding
records and the ids acked within ``acked_memory`` (10 min of publish time by default).
``backlog_factory(spec)`` can supply another ``pt_base`` (e.g. a
:class:`~beam_pipelines.pubsub.MonitoredBaseBacklog` when others read the base too, or
at rates where that state is too large); the ledger is then not kept.

The restriction is ``OffsetRange(0, spec.max_records + 1)``: one position per emitted record,
so a finite ``max_records`` makes a bounded read (tests), and a last position, the read's
**end**. The read is unbounded otherwise: only an explicit ``stop_after_idle`` (seconds of
real time without a base record) ends it early, so a test can never hang. A read that
ends (its budget spent, or idle) does not finish in the bundle that read its last
records: it checkpoints with the end as its remainder, and the resume of that committed
state sends the acks it owed, claims the end and finishes, reading nothing. A runner that
never finalizes bundles thus still acks everything a finished read committed. A drain
does the same: :meth:`ReadWithTrackingWatermarkFn.truncate` (Beam's ``truncate``, called
on every restriction of a draining pipeline) leaves only the end.

Failing loudly: a subscription that does not exist or may not be read (``NotFound``,
``PermissionDenied``), checked when the read starts and on every pull, fails the pipeline
with :class:`SubscriptionError` naming it; so does a subscription of another topic than
``spec.topic``. Other RPC errors are transient: counted (``rpc_errors`` metrics) and
retried. A message whose event-time attribute is missing or bad goes to the
:data:`DEAD_LETTER` output (a ``PubsubRecord`` with its ``error``, stamped with its publish
time) when ``dead_letter`` is on, and is acked either way.

:class:`ReadFromPubSubWithTrackingWatermark` wraps it all as a ``PTransform``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp
from google.api_core import exceptions as gexc

from beam_pipelines.pubsub import (
    REASON_LEASE_GRACE,
    BaseBacklog,
    BaseConsumer,
    Clock,
    TrackingReader,
    TrackingWatermarkEstimator,
    TrackingWatermarkEstimatorProvider,
    system_clock,
)
from beam_pipelines.resume_claims import ResumeClaims
from theory.columns import check_duration
from theory.time import MIN_TIMESTAMP, SECOND

__all__ = [
    "DEAD_LETTER",
    "METRICS_NAMESPACE",
    "PubsubReadSpec",
    "ReadFromPubSubWithTrackingWatermark",
    "ReadWithTrackingWatermarkFn",
    "SubscriptionError",
]

#: The namespace of the DoFn's Beam metrics.
METRICS_NAMESPACE = "pubsub_tracking"
#: Seconds between pulls while a bundle polls an empty subscription.
_IDLE_SLEEP_S = 0.05
#: The tag of the dead-letter output (messages with a bad event-time attribute).
DEAD_LETTER = "dead_letter"
#: RPC errors that no retry will cure: the pipeline fails naming the subscription.
_FATAL_RPC = ("NotFound", "PermissionDenied", "Forbidden", "Unauthenticated")


class SubscriptionError(RuntimeError):
    """A subscription cannot be read: missing, not allowed, or of another topic."""


# The DoFn is its own restriction and watermark-estimator provider.
_SELF_RESTRICTION = beam.DoFn.RestrictionParam()
_SELF_WATERMARK = beam.DoFn.WatermarkEstimatorParam()


def _fail_if_fatal(puller: Any) -> None:
    """:class:`SubscriptionError` naming the subscription if a pull failed for good."""
    for what in puller.rpc_errors:
        rpc, _, name = what.partition(": ")
        if rpc == "pull" and name in _FATAL_RPC:
            raise SubscriptionError(
                f"subscription {puller.subscription}: pull failed with {name} (does it "
                "exist, and may this pipeline's credentials pull from it?)"
            )


@dataclass(frozen=True)
class PubsubReadSpec:
    """What to read: full subscription paths, Beam's attribute names, a record budget."""

    base_subscription: str
    tracking_subscription: str
    timestamp_attribute: str
    id_label: str | None = None
    max_records: int = 2**62
    #: The topic both subscriptions must be attached to (checked at start), if given.
    topic: str | None = None


class ReadWithTrackingWatermarkFn(
    beam.DoFn, RestrictionProvider, TrackingWatermarkEstimatorProvider
):
    """Reads :class:`PubsubReadSpec` elements; see the module docstring.

    While the base subscription is empty, a bundle keeps polling for ``idle_poll`` seconds
    (of ``clock``) before it checkpoints: fewer, larger checkpoints (FnApiRunner's
    ``result.metrics()`` fails past about a thousand bundles of a stage, see
    :mod:`beam_pipelines.metrics`).
    ``estimator_params`` are :class:`~theory.dataflow.pubsub.TrackingEstimator`'s (``band``,
    ``idle_advance_after``, ``idle_lag``, ``bucket_width``, ``cap_at_idle_lag``; µs) and the
    ledger's ``acked_memory`` (µs); ``clock`` gives processing time (µs);
    ``records_per_bundle`` records are emitted before the DoFn checkpoints itself
    (``defer_remainder``); ``claims_dir`` is where attempts claim the states they resume
    (:class:`~beam_pipelines.resume_claims.ResumeClaims`; a shared file system when the
    runner's workers span hosts); ``owed_lease`` is how long (s) the messages whose acks
    the bundle owes stay leased after it checkpoints (None: not extended).

    ``PUBSUB_EMULATOR_HOST`` is read when the DoFn is built and set in the worker at
    ``setup`` when the worker lacks it: a runner's workers (Spark's Python workers, say)
    need not share the environment of the process that built the pipeline.
    """

    def __init__(
        self,
        *,
        clock: Clock = system_clock,
        lease_grace: int = 10 * SECOND,
        records_per_bundle: int = 100,
        max_messages: int = 100,
        stop_after_idle: float | None = None,
        backlog_factory: Callable[[PubsubReadSpec], BaseBacklog] | None = None,
        dead_letter: bool = False,
        idle_poll: float = 1.0,
        claims_dir: str | None = None,
        owed_lease: int | None = 60,
        **estimator_params: Any,
    ) -> None:
        beam.DoFn.__init__(self)
        TrackingWatermarkEstimatorProvider.__init__(self, **estimator_params)
        self.claims = ResumeClaims(claims_dir)
        self.clock = clock
        self.lease_grace = check_duration(lease_grace, "lease_grace")
        self.records_per_bundle = check_duration(
            records_per_bundle, "records_per_bundle", allow_zero=False
        )
        self.max_messages = check_duration(max_messages, "max_messages", allow_zero=False)
        if stop_after_idle is not None and not stop_after_idle > 0:
            raise ValueError(f"stop_after_idle must be > 0 s or None, got {stop_after_idle}")
        self.stop_after_idle = None if stop_after_idle is None else float(stop_after_idle)
        self.dead_letter = bool(dead_letter)
        if not idle_poll >= 0:
            raise ValueError(f"idle_poll must be >= 0 s, got {idle_poll}")
        self.idle_poll = float(idle_poll)
        if owed_lease is not None and not (
            isinstance(owed_lease, int)
            and not isinstance(owed_lease, bool)
            and 1 <= owed_lease <= 600
        ):
            raise ValueError(
                f"owed_lease must be whole seconds in [1, 600] (Pub/Sub's ack deadline) or "
                f"None, got {owed_lease!r}"
            )
        self.owed_lease = owed_lease
        self.backlog_factory = backlog_factory
        self.emulator_host = os.environ.get("PUBSUB_EMULATOR_HOST")
        self._subscriber: Any = None
        self._checked: set[PubsubReadSpec] = set()

    # ------------------------------------------------------------------ restriction

    def initial_restriction(self, element: PubsubReadSpec) -> OffsetRange:
        return OffsetRange(0, element.max_records + 1)  # the last position is the end

    def truncate(self, element: PubsubReadSpec, restriction: OffsetRange) -> OffsetRange | None:
        """On a drain (Beam's ``truncate``): only the read's end, whose resume sends the
        acks the committed state owes and reads nothing; None for an empty restriction."""
        if restriction.start >= restriction.stop:
            return None
        return OffsetRange(restriction.stop - 1, restriction.stop)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element: PubsubReadSpec, restriction: OffsetRange) -> int:
        return int(restriction.size())

    # ------------------------------------------------------------------ lifecycle

    def setup(self) -> None:
        from google.cloud import pubsub_v1

        if self.emulator_host:
            os.environ.setdefault("PUBSUB_EMULATOR_HOST", self.emulator_host)
        self._subscriber = pubsub_v1.SubscriberClient()

    def teardown(self) -> None:
        if self._subscriber is not None:
            self._subscriber.close()
            self._subscriber = None

    def _check_subscriptions(self, spec: PubsubReadSpec) -> None:
        """:class:`SubscriptionError` unless both subscriptions exist, may be read, and
        belong to ``spec.topic`` (when given)."""
        for role, path in (
            ("base", spec.base_subscription),
            ("tracking", spec.tracking_subscription),
        ):
            try:
                sub = self._subscriber.get_subscription(
                    request={"subscription": path}, timeout=30, retry=None
                )
            except gexc.GoogleAPIError as err:
                if type(err).__name__ in _FATAL_RPC:
                    raise SubscriptionError(
                        f"{role} subscription {path}: {type(err).__name__}: {err}"
                    ) from err
                continue  # transient: the pulls will tell
            if spec.topic is not None and sub.topic != spec.topic:
                raise SubscriptionError(
                    f"{role} subscription {path} is attached to {sub.topic}, not {spec.topic}"
                )

    def process(
        self,
        spec: PubsubReadSpec,
        finalizer: Any = beam.DoFn.BundleFinalizerParam,
        tracker: Any = _SELF_RESTRICTION,
        watermark: Any = _SELF_WATERMARK,
    ) -> Iterator[TimestampedValue | beam.pvalue.TaggedOutput]:
        # ``finalizer`` must come before the restriction and estimator parameters (Beam
        # fills them by keyword; a later positional parameter collides with them).
        # ``watermark`` is our TrackingWatermarkEstimator behind Beam's thread-safe
        # wrapper: only its methods are reachable, each under the wrapper's lock.
        wm: TrackingWatermarkEstimator = watermark
        ns = METRICS_NAMESPACE
        if spec not in self._checked:
            self._check_subscriptions(spec)
            self._checked.add(spec)
        resumed_from, _ = wm.tokens()
        if not self.claims.claim(resumed_from):  # a first start or a retry
            wm.hold_until_at_least(self.clock() + self.lease_grace)
            Metrics.counter(ns, "lease_grace_armed").inc()
        # With a backlog_factory the ledger is not needed: it is not kept (the state stays
        # small), and the base consumer's own throwaway ledger serves it.
        ledger = wm.ledger() if self.backlog_factory is None else None
        backlog = self.backlog_factory(spec) if self.backlog_factory else wm.ledger()
        common: dict[str, Any] = {
            "timestamp_attribute": spec.timestamp_attribute,
            "id_label": spec.id_label,
            "max_messages": self.max_messages,
        }
        # Used for pulling and acking only; the estimator is ``wm``'s.
        tracking = TrackingReader(
            self._subscriber, spec.tracking_subscription, backlog=backlog, **common
        )
        base = BaseConsumer(self._subscriber, spec.base_subscription, ledger=ledger, **common)
        owed = wm.take_owed()  # the state is committed: settle what its attempt owed
        tracking.ack_ids(owed.tracking)
        base.ack_owed(owed.base)
        if wm.last_record() is None:
            wm.set_last_record(self.clock())  # idle time counts from the first start
        started = self.clock()
        pos = tracker.current_restriction().start
        end = tracker.current_restriction().stop - 1  # the read's end (see the module)
        if pos >= end:  # the end, or an empty restriction: the acks are sent, finish
            if pos == end:
                tracker.try_claim(end)
            return
        emitted = 0
        owed_base: list[Any] = []  # records this attempt owes acks for
        owed_tracking: list[Any] = []
        try:
            while emitted < self.records_per_bundle:
                for _ in range(tracking.max_pulls):  # drain the tracking subscription
                    batch = tracking.pull()
                    _fail_if_fatal(tracking)
                    if not batch:
                        break
                    wm.record(batch)
                    for rec in batch:
                        if ledger is not None and rec.event_time is not None:
                            ledger.expect(rec.record_id, rec.publish_time)
                    # Acked once the runner has committed the estimator state, or by
                    # whoever resumes that state.
                    finalizer.register(partial(tracking.ack, batch))
                    wm.owe(tracking=batch)
                    owed_tracking.extend(batch)
                records = base.pull() or []
                _fail_if_fatal(base)
                bad = [r for r in records if r.event_time is None]
                good = [r for r in records if r.event_time is not None]
                if self.dead_letter:
                    for rec in bad:
                        out = TimestampedValue(rec, Timestamp(micros=rec.publish_time))
                        yield beam.pvalue.TaggedOutput(DEAD_LETTER, out)
                finalizer.register(partial(base.ack, bad))  # counted, and dead-lettered if on
                wm.owe(base=bad)
                owed_base.extend(bad)
                for i, rec in enumerate(good):
                    if pos >= end or not tracker.try_claim(pos):  # the budget or a split
                        finalizer.register(partial(base.ack, good[:i]))
                        wm.owe(base=good[:i])
                        owed_base.extend(good[:i])
                        base.consumed(good[:i])
                        base.nack(good[i:])
                        if pos < end:  # a split: the rest is its residual's
                            return
                        break
                    pos += 1
                    emitted += 1
                    assert rec.event_time is not None
                    if rec.event_time < wm.watermark_micros():
                        Metrics.counter(ns, "late_emitted").inc()
                    yield TimestampedValue(rec, Timestamp(micros=rec.event_time))
                else:
                    finalizer.register(partial(base.ack, good))
                    wm.owe(base=good)
                    owed_base.extend(good)
                    base.consumed(good)  # committed with this state: no longer holds pt_base
                if pos >= end:  # the whole budget is claimed: the next resume ends the read
                    break
                e = wm.update(
                    self.clock(),
                    backlog.oldest_unacked_publish_time(),
                    tracking.tracking_has_backlog(),
                )
                if e.reason == REASON_LEASE_GRACE:
                    Metrics.counter(ns, "lease_grace_holds").inc()
                now = self.clock()
                if records:
                    wm.set_last_record(now)
                elif (
                    self.stop_after_idle is not None
                    and now - (wm.last_record() or now) > self.stop_after_idle * SECOND
                ):
                    # nothing for too long: skip to the end, which the next resume claims
                    tracker.try_claim(end - 1)
                    break
                elif now - started < self.idle_poll * SECOND:
                    time.sleep(_IDLE_SLEEP_S)  # nothing yet: poll again in this bundle
                else:
                    break  # nothing to read for a while: checkpoint and resume shortly
        finally:
            if self.owed_lease is not None and sys.exc_info()[0] is None:
                # the acks come after the runner's commit: keep the messages till then
                base.extend_leases(owed_base, self.owed_lease)
                tracking.extend_leases(owed_tracking, self.owed_lease)
            Metrics.counter(ns, "emitted").inc(emitted)
            # Distributions, not gauges: the runner's gauge merge across bundles is not
            # "latest wins"; the watermark is monotonic, so its distribution's max is it.
            value = wm.watermark_micros()
            if value > MIN_TIMESTAMP:
                Metrics.distribution(ns, "watermark_us").update(value)
            Metrics.distribution(ns, "regressions").update(wm.counts()["regressions"])
            for side, puller in (("tracking", tracking), ("base", base)):
                for reason, n in puller.attribute_errors.items():
                    Metrics.counter(ns, f"{side} attribute_errors: {reason}").inc(n)
                for what, n in puller.rpc_errors.items():
                    Metrics.counter(ns, f"{side} rpc_errors: {what}").inc(n)
        Metrics.counter(ns, "checkpoints").inc()
        tracker.defer_remainder(Duration(seconds=0 if emitted else 0.05))


class ReadFromPubSubWithTrackingWatermark(beam.PTransform):
    """Read ``base_subscription`` of ``topic`` with the tracking watermark of
    ``tracking_subscription`` (full paths): a ``PCollection`` of ``PubsubRecord`` stamped
    with their event time (``timestamp_attribute``: milliseconds or RFC 3339), unbounded
    unless ``max_records`` or ``stop_after_idle`` (seconds without data) is given.

    With ``dead_letter=True`` the result is a dict: ``"records"`` and ``"dead_letter"``
    (the messages whose event-time attribute is missing or bad, stamped with their
    publish time). A missing or unreadable subscription fails the pipeline naming it.
    The other keyword arguments go to :class:`ReadWithTrackingWatermarkFn` (estimator
    parameters in µs, ``lease_grace``, ``records_per_bundle``, ...).
    """

    def __init__(
        self,
        topic: str | None,
        base_subscription: str,
        tracking_subscription: str,
        *,
        timestamp_attribute: str = "ts",
        id_label: str | None = None,
        max_records: int = 2**62,
        dead_letter: bool = False,
        **reader: Any,
    ) -> None:
        super().__init__()
        for name, path in (
            ("base_subscription", base_subscription),
            ("tracking_subscription", tracking_subscription),
        ):
            if (
                not isinstance(path, str)
                or not path.startswith("projects/")
                or ("/subscriptions/" not in path)
            ):
                raise ValueError(
                    f"{name} must be a path projects/<project>/subscriptions/<name>, got {path!r}"
                )
        if base_subscription == tracking_subscription:
            raise ValueError("the base and tracking subscriptions must differ")
        if topic is not None and (not isinstance(topic, str) or "/topics/" not in topic):
            raise ValueError(
                f"topic must be a path projects/<project>/topics/<name>, got {topic!r}"
            )
        self.spec = PubsubReadSpec(
            base_subscription,
            tracking_subscription,
            timestamp_attribute,
            id_label=id_label,
            max_records=check_duration(max_records, "max_records", allow_zero=False),
            topic=topic,
        )
        self.dead_letter = dead_letter
        self.fn = ReadWithTrackingWatermarkFn(dead_letter=dead_letter, **reader)

    def expand(self, pbegin: Any) -> Any:
        specs = pbegin | "Spec" >> beam.Create([self.spec])
        if not self.dead_letter:
            return specs | "Read" >> beam.ParDo(self.fn)
        outputs = specs | "Read" >> beam.ParDo(self.fn).with_outputs(DEAD_LETTER, main="records")
        return {"records": outputs.records, DEAD_LETTER: outputs[DEAD_LETTER]}
