"""spark_backend: the ``watermarks`` command line, watermark analytics on Spark, and a
Beam runner on PySpark.

``PySparkRunner`` and ``PySparkRunnerOptions`` (a Beam runner on PySpark, see
:mod:`spark_backend.runner`) load on first use, so ``import spark_backend`` stays light
and ``--runner=spark_backend.PySparkRunner`` resolves. The map of the package, one role
a folder (each sub-package's docstring maps its modules):

================================  =====================================================
``spark_backend.session``         the one SparkSession, its JVM's fast start, memory
``spark_backend.cli``             the ``watermarks`` command: parser and commands,
                                  preflight checks, jobs, atomic outputs, errors
``spark_backend.report``          the report: HTML, figures, tables, the cross-system
                                  section, the strategy comparison
``spark_backend.analytics``       watermark analytics of a trace on Spark, exact
``spark_backend.traces``          traces as Spark DataFrames; a user's trace read by
                                  either engine
``spark_backend.simulate``        ``simulate --engine spark``: the simulator on key
                                  partitions
``spark_backend.runner``          ``PySparkRunner``: plan, stages, grouping, batch
                                  execution, streaming
``spark_backend.pytest_plugin``   the ``spark`` fixture (a ``pytest11`` entry point)
================================  =====================================================
"""

from __future__ import annotations

# Nothing is imported here: the console entry point (``spark_backend.cli:main``) passes
# through this module before its signal handlers are in place.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from spark_backend.runner import PySparkRunner, PySparkRunnerOptions

__all__ = ["PySparkRunner", "PySparkRunnerOptions"]

_LAZY = {"PySparkRunner": "spark_backend.runner", "PySparkRunnerOptions": "spark_backend.runner"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_backend' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
