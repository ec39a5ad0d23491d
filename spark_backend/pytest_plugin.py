"""pytest plugin (entry point ``pytest11``): the ``spark`` fixture.

``spark`` is the process-wide SparkSession of :func:`spark_backend.session.get_session`
(local mode and the session module's defaults; ``SPARK_REMOTE`` selects Spark Connect),
built once per test session and stopped at its end. A process runs one SparkContext, so
every test shares it. Nothing here imports pyspark until a test asks for ``spark``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test session's SparkSession (stopped at the end of the session)."""
    from spark_backend.session import get_session, stop_session

    session = get_session()
    yield session
    stop_session()
