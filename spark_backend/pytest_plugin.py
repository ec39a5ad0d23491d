"""pytest plugin (entry point ``pytest11``): the ``spark`` fixture.

``spark`` is the process-wide SparkSession of :func:`spark_backend.session.session.get_session`
(local mode and the session module's defaults; ``SPARK_REMOTE`` selects Spark Connect),
built once per test session and stopped at its end. A process runs one SparkContext, so
every test shares it. Nothing here imports pyspark until a test asks for ``spark``.

Under pytest-xdist every worker process builds its own session; the driver memory the
session module gives one local process (half the RAM) is then split between the workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


def worker_conf() -> dict[str, str]:
    """The overrides for one of ``PYTEST_XDIST_WORKER_COUNT`` local sessions on one machine:
    ``spark.driver.memory`` divided by the worker count (at least 1 GiB); none otherwise."""
    from spark_backend.session.session import default_conf

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    memory = default_conf("local[*]").get("spark.driver.memory")
    if workers <= 1 or memory is None or os.environ.get("SPARK_REMOTE"):
        return {}
    return {"spark.driver.memory": f"{max(1, int(memory.removesuffix('g')) // workers)}g"}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test session's SparkSession (stopped at the end of the session)."""
    from spark_backend.session.session import get_session, stop_session

    session = get_session(conf=worker_conf())
    yield session
    stop_session()
