"""The translation table: for each transform URN, how PySparkRunner runs it in batch and
in ``--streaming``, as the modules that translate it (relative to
``spark_backend.runner``), or the reason it is refused there.

Two kinds of entry. The pipeline's leaves (``leaf``) are what the check of a pipeline
(:mod:`.validate`) accepts; its lists are this table's. Beam's optimiser (FnApiRunner's
phases, :mod:`.plan`) turns them into fused stages whose transforms carry further URNs
(data channels, combiner and splittable-DoFn phases, reads from an impulse): those are
entries too, never leaves. ``lean`` names the module of an entry's lean op
(:mod:`.stages.lean.program` builds those). Which bytes a value carries across a stage
is the translation's (:mod:`.grouping.keyed_columns`), not the windowing selector's.

To change how one kind of transform runs, read its entry and the modules it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from apache_beam.portability import common_urns, python_urns
from apache_beam.runners.worker import bundle_processor

__all__ = [
    "COMPOSITES_RUN_WHOLE",
    "STREAMING_ONLY_URNS",
    "SUPPORTED_LEAF_URNS",
    "TRANSLATIONS",
    "Translation",
]


@dataclass(frozen=True)
class Translation:
    """How the runner runs one kind of transform: ``batch`` and ``streaming`` are the
    modules that translate it, or the reason it is refused there (a sentence); ``leaf``:
    a pipeline may contain it (else only Beam's optimiser makes it); ``whole``: a
    composite run whole, its parts unchecked; ``lean``: the module of its lean op, if any."""

    batch: tuple[str, ...] | str
    streaming: tuple[str, ...] | str
    leaf: bool = True
    whole: bool = False
    lean: str = ""


_P = common_urns.primitives
_SDF = common_urns.sdf_components
_COMBINE = common_urns.combine_components

#: Beam's bundle processor, or the lean path when the stage is lean.
_BUNDLES: Final = ("stages.bundles",)
_PARDO_BATCH: Final = (*_BUNDLES, "stages.lean.pardo")
_PARDO_STREAMING: Final = (
    *_PARDO_BATCH,
    "streaming.keyed_state",
    "streaming.pushback",
    "streaming.side_views",
)
_SDF_BATCH: Final = (*_BUNDLES, "batch.executor")
_SDF_STREAMING: Final = (*_BUNDLES, "stages.lean.sdf", "streaming.unbounded")

TRANSLATIONS: Final[Mapping[str, Translation]] = MappingProxyType(
    {
        _P.IMPULSE.urn: Translation(("batch.executor",), ("streaming.driver",)),
        _P.PAR_DO.urn: Translation(
            _PARDO_BATCH, _PARDO_STREAMING, lean="stages.lean.pardo"
        ),
        _P.FLATTEN.urn: Translation(
            ("batch.executor", "stages.lean.program"),
            ("streaming.driver", "stages.lean.program"),
            lean="stages.lean.program",
        ),
        _P.GROUP_BY_KEY.urn: Translation(
            (
                "grouping.group_by_key",
                "grouping.engine",
                "grouping.columns",
                "grouping.keyed_columns",
            ),
            ("streaming.grouping", "streaming.driver"),
        ),
        _P.ASSIGN_WINDOWS.urn: Translation(
            (*_BUNDLES, "stages.lean.windows"),
            (*_BUNDLES, "stages.lean.windows"),
            lean="stages.lean.windows",
        ),
        common_urns.deprecated_primitives.READ.urn: Translation(
            (*_BUNDLES, "stages.text_source"), "reads are not supported in streaming yet"
        ),
        common_urns.composites.COMBINE_PER_KEY.urn: Translation(
            ("stages.lean.combine", "grouping.group_by_key"),
            ("streaming.lifting", "stages.lean.combine", "streaming.grouping"),
            whole=True,
        ),
        _P.TEST_STREAM.urn: Translation(
            "it is streaming-only: run the pipeline with --streaming",
            ("streaming.sources", "streaming.elements", "streaming.driver"),
        ),
        # splittable DoFns, as Beam's expand_sdf phase splits them (leaves too: Beam's
        # own runners accept them as ParDos)
        _SDF.PAIR_WITH_RESTRICTION.urn: Translation(_SDF_BATCH, _SDF_STREAMING),
        _SDF.SPLIT_AND_SIZE_RESTRICTIONS.urn: Translation(_SDF_BATCH, _SDF_STREAMING),
        _SDF.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn: Translation(
            _SDF_BATCH, _SDF_STREAMING
        ),
        _SDF.TRUNCATE_SIZED_RESTRICTION.urn: Translation(
            _SDF_BATCH, (*_SDF_STREAMING, "streaming.truncate")
        ),
        # only inside fused stages
        bundle_processor.DATA_INPUT_URN: Translation(
            ("batch.executor",), ("streaming.driver",), leaf=False
        ),
        bundle_processor.DATA_OUTPUT_URN: Translation(
            ("batch.executor",), ("streaming.driver", "streaming.sinks"), leaf=False
        ),
        python_urns.IMPULSE_READ_TRANSFORM: Translation(
            (*_BUNDLES, "stages.text_source"),
            "reads are not supported in streaming yet",
            leaf=False,
            lean="stages.text_source",
        ),
        _COMBINE.COMBINE_PER_KEY_PRECOMBINE.urn: Translation(
            (*_BUNDLES, "stages.lean.combine"),
            (*_BUNDLES, "stages.lean.combine"),
            leaf=False,
            lean="stages.lean.combine",
        ),
        _COMBINE.COMBINE_PER_KEY_MERGE_ACCUMULATORS.urn: Translation(
            (*_BUNDLES, "stages.lean.combine"),
            (*_BUNDLES, "stages.lean.combine"),
            leaf=False,
            lean="stages.lean.combine",
        ),
        _COMBINE.COMBINE_PER_KEY_EXTRACT_OUTPUTS.urn: Translation(
            (*_BUNDLES, "stages.lean.combine"),
            (*_BUNDLES, "stages.lean.combine"),
            leaf=False,
            lean="stages.lean.combine",
        ),
        _COMBINE.COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS.urn: Translation(
            (*_BUNDLES, "stages.lean.combine"),
            (*_BUNDLES, "stages.lean.combine"),
            leaf=False,
            lean="stages.lean.combine",
        ),
    }
)


def _leaves(batch: bool, streaming: bool) -> frozenset[str]:
    return frozenset(
        urn
        for urn, t in TRANSLATIONS.items()
        if t.leaf
        and isinstance(t.batch, tuple) == batch
        and (not streaming or isinstance(t.streaming, tuple))
    )


#: Leaf kinds a batch run executes (a ``--streaming`` run checks its own, beside these).
SUPPORTED_LEAF_URNS: Final[frozenset[str]] = _leaves(batch=True, streaming=False)
#: Leaf kinds only a ``--streaming`` run executes.
STREAMING_ONLY_URNS: Final[frozenset[str]] = _leaves(batch=False, streaming=True)
#: Composites the runner runs whole (their parts are not checked).
COMPOSITES_RUN_WHOLE: Final[frozenset[str]] = frozenset(
    urn for urn, t in TRANSLATIONS.items() if t.whole
)
