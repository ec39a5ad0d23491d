"""spark_backend.

``PySparkRunner`` and ``PySparkRunnerOptions`` (a Beam runner on PySpark, see
:mod:`spark_backend.runner`) load on first use, so ``import spark_backend`` stays light
and ``--runner=spark_backend.PySparkRunner`` resolves.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_backend.runner import PySparkRunner, PySparkRunnerOptions

__all__ = ["PySparkRunner", "PySparkRunnerOptions"]

_LAZY = {"PySparkRunner": "spark_backend.runner", "PySparkRunnerOptions": "spark_backend.runner"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_backend' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
