"""PySpark's Python worker daemon with Beam already imported (``spark.python.daemon.module``).

Spark starts one daemon per executor and forks a Python worker from it for each task
that finds no idle worker. A plain ``pyspark.daemon`` has not imported Apache Beam, so
every fresh worker imports it on its first Beam task, seconds of CPU paid again each
time concurrent tasks need one more worker (a streaming micro-batch can spend most of
its time in such imports). This daemon imports Beam and
the runner's task modules once, before forking, so a worker starts with them loaded
(copy-on-write). An import that fails is left to the task, which then reports it.
:func:`spark_backend.session.session.default_conf` selects this module.
"""

from __future__ import annotations

import contextlib

with contextlib.suppress(ImportError):
    import apache_beam  # noqa: F401

    import spark_backend.runner.stages.bundles
    import spark_backend.runner.streaming.grouping  # noqa: F401

import gc

from pyspark import daemon

if __name__ == "__main__":
    gc.freeze()
    daemon.manager()
