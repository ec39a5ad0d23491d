"""The lean path's ParDo: a plain DoFn called in a tight loop over a batch's values.

:func:`pardo_op` takes only the DoFns Beam itself runs with its ``SimpleInvoker``
or with its ``PerWindowInvoker`` passing the element and at most ``TimestampParam``,
``WindowParam`` and ``PaneInfoParam`` (no side inputs, no extra arguments, no other
``process`` parameter such as state, timers or the key; plain Python defaults are fine,
Beam leaves them too; the parameters are passed positionally as Beam's invoker passes
them, and a DoFn asking for its window is called once per window of an element, as
Beam's invoker explodes it), with one output, no ``process_batch``, no splittable or
watermark-estimating DoFn, and no ``start_bundle``/``finish_bundle``; anything else
returns a reason and the stage stays on Beam's bundle processor. Outputs follow Beam's
``_OutputHandler`` rule for rule: ``None`` means no output; a ``TaggedOutput`` to the
one output tag goes to it and to another tag is dropped; a ``TimestampedValue`` gets the
input windowing's windows; a ``WindowedValue`` is taken as it is (its windows repeated
per input window); any other value keeps the input element's timestamp, windows and
pane.
"""

from __future__ import annotations

import inspect
import itertools
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np
from apache_beam.internal import pickler
from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.pvalue import TaggedOutput
from apache_beam.runners.common import DoFnSignature
from apache_beam.transforms import core
from apache_beam.transforms.window import GlobalWindow, GlobalWindows, TimestampedValue, WindowFn
from apache_beam.utils import proto_utils
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN, PaneInfo, WindowedValue

from spark_backend.runner.batch.spark_errors import note_element
from spark_backend.runner.stages.lean.batch import GLOBAL, Batch

__all__ = ["CHUNK", "ParDoOp", "augmented", "dofn_of", "pardo_op"]

#: A ParDo hands on its output in batches of about this many elements.
CHUNK: Final[int] = 1 << 16
_GLOBAL_WINDOW: Final = GlobalWindow()
_SPECIAL: Final = (TaggedOutput, TimestampedValue, WindowedValue)
_SIZED: Final = (list, tuple)  # a DoFn's results appended at once (held by the DoFn anyway)

Emit = Callable[[Batch], None]


def augmented(exn: BaseException, label: str) -> BaseException:
    """``exn`` with Beam's `` [while running 'label']`` suffix (as ``DoFnRunner`` does)."""
    if getattr(exn, "_tagged_with_step", False):
        return exn
    note = f" [while running '{label}']"
    try:
        new: BaseException = type(exn)(exn.args[0] + note, *exn.args[1:])
    except Exception:
        new = RuntimeError(traceback.format_exception_only(type(exn), exn)[-1].strip() + note)
    new._tagged_with_step = True  # type: ignore[attr-defined]
    return new


def pardo_op(transform: pb.PTransform, transform_id: str, stage: Any) -> ParDoOp | str:
    """The lean op for a ParDo ``transform``, or why it is not one."""
    found = dofn_of(transform, stage)
    if isinstance(found, str):
        return found
    fn, windowing = found
    if not isinstance(fn, core.DoFn):
        return "not a DoFn"
    signature = DoFnSignature(fn)
    reason = _plain(fn, signature)
    if reason:
        return reason
    (tag,) = transform.outputs
    return ParDoOp(transform.unique_name, transform_id, fn, windowing.windowfn, tag, signature)


def dofn_of(
    transform: pb.PTransform, stage: Any, splittable: bool = False
) -> tuple[Any, Any] | str:
    """The DoFn of a ParDo ``transform`` with one input and output and no side inputs,
    state, timers, sorted or stable input or extra arguments, and the windowing its
    outputs get; else why not. ``splittable``: a splittable (or finalizing) DoFn's
    ``ProcessSizedElementsAndRestrictions`` is accepted too."""
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.ParDoPayload)
    if payload.side_inputs or payload.state_specs or payload.timer_family_specs:
        return "side inputs, state or timers"
    if not splittable and (payload.restriction_coder_id or payload.requests_finalization):
        return "splittable or finalizing"
    if payload.requires_time_sorted_input or payload.requires_stable_input:
        return "needs sorted or stable input"
    known = core.StatelessDoFnInfo.REGISTERED_DOFNS  # KeyWithNone, ...
    if payload.do_fn.urn != python_urns.PICKLED_DOFN_INFO and payload.do_fn.urn not in known:
        return f"DoFn kind {payload.do_fn.urn}"
    if len(transform.outputs) != 1 or len(transform.inputs) != 1:
        return "more than one input or output"
    info = core.DoFnInfo.from_runner_api(payload.do_fn, stage.context)
    fn, args, kwargs, side, windowing = pickler.loads(info.serialized_dofn_data())
    if args or kwargs or side:
        return "extra arguments"
    if windowing is None:
        (pcoll,) = transform.inputs.values()
        windowing = stage.windowing_of(pcoll)
    return fn, windowing


def _plain(fn: Any, signature: Any = None) -> str:
    """Empty if Beam runs ``fn`` with its SimpleInvoker and nothing else, else why not
    (``signature``: its ``DoFnSignature``, when the caller has made it)."""
    if not isinstance(fn, core.DoFn):
        return "not a DoFn"
    if type(fn).__module__.startswith("apache_beam.typehints"):
        return "a type-checking wrapper"
    signature = signature or DoFnSignature(fn)
    if signature.is_stateful_dofn() or signature.is_splittable_dofn():
        return "stateful or splittable"
    process = signature.process_method
    if any(_is_param(d) and not _passed(d) for d in process.defaults):
        return "process asks for parameters (key, state, side input, ...)"
    if any(_passed(d) for d in process.defaults) and len(process.args) != len(process.defaults) + 1:
        return "process asks for parameters after arguments without defaults"
    if fn._process_batch_defined or fn._process_yields_batches:
        return "batched DoFn"
    for method in ("start_bundle", "finish_bundle"):
        if _overrides(fn, method):
            return f"DoFn overrides {method}"
    return ""


#: The ``process`` parameters the lean ParDo passes (in Beam's positional order).
_PARAMS: Final = (core.DoFn.TimestampParam, core.DoFn.WindowParam, core.DoFn.PaneInfoParam)


def _passed(default: Any) -> bool:
    """Whether ``default`` is one of :data:`_PARAMS` (compared as Beam's invoker does)."""
    return any(param == default for param in _PARAMS)


def _is_param(default: Any) -> bool:
    """Whether a default of ``process`` asks Beam for something (``TimestampParam``,
    ``WindowParam``, state, ...); plain defaults are left to Python, as Beam leaves them."""
    return isinstance(default, core._DoFnParam) or (
        isinstance(default, type) and issubclass(default, core._DoFnParam)
    )


def _overrides(fn: Any, method: str) -> bool:
    return getattr(type(fn), method, None) is not getattr(core.DoFn, method, None)


class ParDoOp:
    """A plain DoFn over batches (see the module docstring)."""

    def __init__(
        self,
        label: str,
        transform_id: str,
        fn: Any,
        window_fn: Any,
        tag: str,
        signature: Any = None,
    ) -> None:
        self.label = label
        self.transform_id = transform_id
        self._fn = fn
        self._window_fn = window_fn
        self._global = type(window_fn) is GlobalWindows
        self._tag = tag
        signature = signature or DoFnSignature(fn)
        self._process = signature.process_method.method_value
        #: The parameters ``process`` asks for, in Beam's positional order (its plain
        #: defaults are left to Python, as Beam's invoker leaves them).
        self._params = tuple(d for d in signature.process_method.defaults if _passed(d))
        self._per_window = any(core.DoFn.WindowParam == d for d in self._params)
        #: ``FlatMap(str.split)``: a slice of str values is split in one C call.
        self._splits_words = type(fn) is core.CallableWrapperDoFn and fn._fn is str.split
        self._check = not isinstance(fn, core.CallableWrapperDoFn) and not (
            inspect.isgeneratorfunction(self._process)
        )

    def setup(self) -> None:
        self._fn.setup()

    def teardown(self) -> None:
        self._fn.teardown()

    def process(self, batch: Batch, emit: Emit) -> None:
        """Call the DoFn on every value of ``batch``; emit outputs in chunks of CHUNK
        as soon as they are made, so at most about CHUNK outputs are held here (an
        iterator a DoFn returns is read a chunk at a time; a list it returns is its own)."""
        if self._params:
            if self._per_window:
                batch = _one_window_each(batch)
            extra: list[tuple[Any, ...]] | None = _param_args(batch, self._params)
        elif not self._check and _uniform(batch):
            self._process_uniform(batch, emit)
            return
        else:
            extra = None
        process = self._process
        values: list[Any] = []
        parents: list[int] = []
        for i, value in enumerate(batch.values):
            try:
                results = process(value) if extra is None else process(value, *extra[i])
                if self._check:
                    self._check = False
                    if isinstance(results, (str, bytes, dict)):
                        raise TypeError(
                            f"Returning a {type(results).__name__} from a ParDo or FlatMap "
                            f"is not allowed. Please use list({results!r}) if you really "
                            "want this behavior."
                        )
                if results is None:
                    continue
                if type(results) in _SIZED:
                    values.extend(results)
            except Exception as exn:
                raise note_element(augmented(exn, self.label), value) from exn
            if type(results) in _SIZED:
                added = len(results)
                if added == 1:
                    parents.append(i)
                elif added:
                    parents.extend([i] * added)
                if len(values) >= CHUNK:
                    self._emit(batch, values, parents, emit)
                    values, parents = [], []
                results = None  # (not alive while the DoFn makes the next one)
                continue
            for added in self._pull(results, values):
                parents.extend([i] * added)
                if len(values) >= CHUNK:
                    self._emit(batch, values, parents, emit)
                    values.clear()  # (in place: _pull appends to this list)
                    parents.clear()
        if values:
            self._emit(batch, values, parents, emit)

    def _pull(self, results: Any, out: list[Any]) -> Iterator[int]:
        """Append a DoFn's ``results`` to ``out``: a list or tuple at once, any other
        iterable up to CHUNK - len(out) at a time; yield how many were added each time
        (the caller empties ``out`` in place when it reaches CHUNK). A DoFn's error is raised
        with the transform's label."""
        try:
            if type(results) in _SIZED:
                out.extend(results)
                yield len(results)
                return
            pieces = iter(results)
        except Exception as exn:
            raise augmented(exn, self.label) from exn
        while True:
            before = len(out)
            asked = max(1, CHUNK - before)
            try:
                out.extend(itertools.islice(pieces, asked))
            except Exception as exn:
                raise augmented(exn, self.label) from exn
            added = len(out) - before
            if added:
                yield added
            if added < asked:  # the iterator is done
                return

    def _process_uniform(self, batch: Batch, emit: Emit) -> None:
        """:meth:`process` for a batch whose elements share one timestamp, the global
        window and one pane: outputs need no parent, so the DoFn runs in the tightest
        loop (element by element, as Beam calls it); outputs are handed on whenever
        CHUNK of them are made. ``FlatMap(str.split)`` over strings is one C call per
        slice of the batch, sized so that a slice's words stay near CHUNK."""
        values = batch.values
        if self._splits_words:
            lo, step = 0, CHUNK
            while lo < len(values):
                piece = values[lo : lo + step]
                if not _all_str(piece):
                    break  # the rest element by element, below (order kept)
                lo += len(piece)
                # str.split() per value, flattened, is the split of the values joined
                # by a space (whitespace runs separate words either way)
                words = " ".join(piece).split()
                step = max(1, min(CHUNK, CHUNK * len(piece) // max(1, len(words))))
                self._emit_plain(batch, words, emit)
            values = values[lo:]
        process = self._process
        out: list[Any] = []
        extend = out.extend
        for value in values:
            try:
                results = process(value)
                if results is None:
                    continue
                if type(results) is list:
                    extend(results)
            except Exception as exn:
                raise note_element(augmented(exn, self.label), value) from exn
            if type(results) is not list:
                for _ in self._pull(results, out):
                    if len(out) >= CHUNK:
                        self._emit_uniform(batch, out, emit)
                        out.clear()
            elif len(out) >= CHUNK:
                self._emit_uniform(batch, out, emit)
                out.clear()
            results = None  # (not alive while the DoFn makes the next one)
        self._emit_uniform(batch, out, emit)

    def _emit_uniform(self, batch: Batch, values: list[Any], emit: Emit) -> None:
        if not values:
            return
        if _has_special(values):  # TaggedOutput, TimestampedValue, WindowedValue
            self._emit(batch, values, [0] * len(values), emit)
            return
        self._emit_plain(batch, values, emit)

    def _emit_plain(self, batch: Batch, values: list[Any], emit: Emit) -> None:
        """Emit plain ``values`` with a uniform ``batch``'s metadata, CHUNK at a time."""
        micros = int(batch.micros[0])
        for lo in range(0, len(values), CHUNK):
            part = values[lo : lo + CHUNK]
            emit(Batch(part, np.full(len(part), micros, np.int64), GLOBAL, batch.panes))

    def _emit(self, batch: Batch, values: list[Any], parents: list[int], emit: Emit) -> None:
        """Hand on outputs in batches of at most CHUNK (one element may have many)."""
        for lo in range(0, len(values), CHUNK):
            emit(self._outputs(batch, values[lo : lo + CHUNK], parents[lo : lo + CHUNK]))

    def finish(self, emit: Emit) -> None:
        return None

    def _outputs(self, batch: Batch, values: list[Any], parents: list[int]) -> Batch:
        """The batch of a chunk of outputs: plain values inherit their parent's
        metadata; TaggedOutput, TimestampedValue and WindowedValue outputs are turned
        into their value and their own metadata as Beam does."""
        found = [j for j, v in enumerate(values) if isinstance(v, _SPECIAL)]
        if not found:
            return batch.take(parents, values)
        if len(found) == len(values) and self._global and batch.windows is GLOBAL:
            stamped = _all_timestamped(values)
            if stamped is not None:  # the common case, as _special makes each one
                return Batch(stamped[0], stamped[1], GLOBAL, PANE_INFO_UNKNOWN)
        special: dict[int, Meta] = {}
        dropped: set[int] = set()
        for j in found:
            try:
                out = self._special(batch, parents[j], values[j])
            except Exception as exn:
                raise augmented(exn, self.label) from exn
            if out is None:
                dropped.add(j)
            else:
                values[j], special[j] = out
        if dropped:
            keep = [j for j in range(len(values)) if j not in dropped]
            renumber = {j: n for n, j in enumerate(keep)}
            values = [values[j] for j in keep]
            parents = [parents[j] for j in keep]
            special = {renumber[j]: m for j, m in special.items()}
        return _with_meta(batch, values, parents, special)

    def _special(self, batch: Batch, i: int, result: Any) -> tuple[Any, Meta] | None:
        """``result``'s value and metadata as Beam's output handler makes its
        WindowedValue (None: a TaggedOutput to another tag, dropped)."""
        if isinstance(result, TaggedOutput):
            if not isinstance(result.tag, str):
                raise TypeError(f"In {self}, tag {result.tag} is not a string")
            if result.tag != self._tag:
                return None
            result = result.value
            if not isinstance(result, (TimestampedValue, WindowedValue)):
                return result, _meta(batch.windowed_value(i))
        count = _window_count(batch, i)
        if isinstance(result, WindowedValue):
            if count != 1:
                result.windows *= count
            return result.value, _meta(result)
        if self._global and count == 1:  # the common case, without objects
            return result.value, (result.timestamp.micros, None, PANE_INFO_UNKNOWN)
        context = WindowFn.AssignContext(result.timestamp, result.value)
        out = WindowedValue(result.value, result.timestamp, self._window_fn.assign(context))
        if count != 1:
            out.windows *= count
        return out.value, _meta(out)


def _one_window_each(batch: Batch) -> Batch:
    """``batch`` with every element in several windows made one element per window (in
    its windows' order) with an unknown pane, as Beam's invoker calls a DoFn that asks
    for its window (it makes each a ``WindowedValue`` of the value, timestamp and window
    only)."""
    windows = batch.windows
    if not isinstance(windows, list) or all(len(ws) <= 1 for ws in windows):
        return batch
    index = [i for i, ws in enumerate(windows) for _ in range(max(1, len(ws)))]
    exploded = batch.take(index, [batch.values[i] for i in index])
    single: list[Any] = []
    panes: list[Any] = []
    kept = exploded.panes
    for ws in windows:
        if len(ws) > 1:
            single.extend((w,) for w in ws)
            panes.extend([PANE_INFO_UNKNOWN] * len(ws))
        else:
            single.append(ws)
            panes.append(kept if isinstance(kept, PaneInfo) else kept[len(panes)])
    exploded.windows = single
    exploded.panes = panes
    return exploded


def _param_args(batch: Batch, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Each element's ``process`` arguments after the element: its timestamp (a Beam
    ``Timestamp``), its window (Beam's ``window, = windows``: one window each, after
    :func:`_one_window_each`) and its pane, in the order ``params`` asks for them."""
    columns: list[list[Any]] = []
    for param in params:
        if param == core.DoFn.TimestampParam:
            columns.append([Timestamp(micros=m) for m in batch.micros.tolist()])
        elif param == core.DoFn.WindowParam:
            columns.append([_only(ws) for ws in batch.window_lists()])
        else:
            columns.append(list(batch.pane_list()))
    return list(zip(*columns, strict=True))


def _only(windows: Any) -> Any:
    (window,) = windows  # as Beam's invoker takes it
    return window


def _uniform(batch: Batch) -> bool:
    """Whether every element of ``batch`` has the same timestamp, window (the global
    one) and pane: then each output inherits the same metadata whatever its parent."""
    return (
        batch.windows is GLOBAL
        and isinstance(batch.panes, PaneInfo)
        and len(batch) > 0
        and int(batch.micros.min()) == int(batch.micros.max())
    )


def _all_str(values: list[Any]) -> bool:
    return set(map(type, values)) == {str}


def _has_special(values: list[Any]) -> bool:
    """Whether any of ``values`` is a TaggedOutput, TimestampedValue or WindowedValue
    (by type, over the distinct types only)."""
    return any(issubclass(t, _SPECIAL) for t in set(map(type, values)))


#: An output's own metadata: µs, windows (None: the global window alone), pane.
Meta = tuple[int, Any, Any]


def _meta(wv: Any) -> Meta:
    windows = tuple(wv.windows)
    alone = len(windows) == 1 and type(windows[0]) is GlobalWindow
    return wv.timestamp_micros, None if alone else windows, wv.pane_info


def _all_timestamped(values: list[Any]) -> tuple[list[Any], np.ndarray] | None:
    """The values and µs of ``values`` when every one is exactly a ``TimestampedValue``
    (each output then goes to the global window at its own timestamp), else None."""
    if not all(type(v) is TimestampedValue for v in values):
        return None
    micros = np.fromiter((v.timestamp.micros for v in values), np.int64, len(values))
    return [v.value for v in values], micros


def _window_count(batch: Batch, i: int) -> int:
    windows = batch.windows
    return 1 if not isinstance(windows, list) else len(windows[i])


def _with_meta(
    batch: Batch, values: list[Any], parents: list[int], special: dict[int, Meta]
) -> Batch:
    """The output batch: ``values`` inheriting their parents' metadata, except the
    ``special`` ones that bring their own."""
    base = batch.take(parents, values)
    if not special:
        return base
    micros = base.micros.copy()
    for j, (m, _, _) in special.items():
        micros[j] = m
    windows: Any = base.windows
    if not (windows is GLOBAL and all(ws is None for _, ws, _ in special.values())):
        windows = base.window_lists()
        for j, (_, ws, _) in special.items():
            windows[j] = (_GLOBAL_WINDOW,) if ws is None else ws
    panes: Any = base.panes
    if not (isinstance(panes, PaneInfo) and all(p == panes for _, _, p in special.values())):
        panes = list(base.pane_list())
        for j, (_, _, p) in special.items():
            panes[j] = p
        if panes and all(p == panes[0] for p in panes):  # one pane for all (compact)
            panes = panes[0]
    return Batch(values, micros, windows, panes)
