"""The ``watermarks`` command line (``watermarks = spark_backend.cli:main``).

==================  =============================================================
``entry``           the console entry point ``main`` (exported here): signal
                    handlers and the memory guard before any heavy import
``interrupts``      Ctrl-C and SIGTERM: handlers, the one line, exit 130 / 143
``commands``        the parser and the ``demo``, ``analyze`` and ``simulate``
                    commands; ``main``, run in-process
``preflight``       the checks made before any work: arguments, outputs, traces
``jobs``            the demo and the analysis of a user's trace, as jobs
``atomic``          atomic outputs: a directory written in full, then swapped in
``errors``          any failure as one line naming its cause (the exit-2 message)
``progress``        the progress bar of long work
``engine``          which engine runs a job: ``local`` or ``spark``
``local``           the strategy comparison without Spark (the ``local`` engine)
``plausible``       plausibility warnings on a trace read for ``analyze``
``seeds``           ``--seeds N``: the seed sweep of ``demo`` and ``simulate``
``saved_trace``     ``demo --save-trace``: the generated trace as Parquet, checked
                    with the ``--out`` guard and written atomically
``__main__``        ``python -m spark_backend.cli``
==================  =============================================================
"""

from __future__ import annotations

from spark_backend.cli.entry import main

__all__ = ["main"]
