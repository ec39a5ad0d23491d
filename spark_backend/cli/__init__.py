"""The ``watermarks`` command line (``watermarks = spark_backend.cli:main``).

==================  =============================================================
``commands``        the parser and the ``demo``, ``analyze`` and ``simulate``
                    commands; ``main`` (exported here, resolved on first use)
``preflight``       the checks made before any work: arguments, outputs, traces
``jobs``            the demo and the analysis of a user's trace, as jobs
``atomic``          atomic outputs: a directory written in full, then swapped in
``errors``          any failure as one line naming its cause (the exit-2 message)
``progress``        the progress bar of long work
``engine``          which engine runs a job: ``local`` or ``spark``
``local``           the strategy comparison without Spark (the ``local`` engine)
``plausible``       plausibility warnings on a trace read for ``analyze``
``__main__``        ``python -m spark_backend.cli``
==================  =============================================================
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_backend.cli.commands import main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name != "main":
        raise AttributeError(f"module 'spark_backend.cli' has no attribute {name!r}")
    value = importlib.import_module("spark_backend.cli.commands").main
    globals()[name] = value
    return value
