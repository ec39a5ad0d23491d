"""Fixtures for the Spark tests: one SparkSession for the whole test session.

``spark`` is :func:`spark_backend.session.get_session` (local mode, the defaults of
:mod:`spark_backend.session`); it is shared with any other test that asks for a session,
since a process runs one SparkContext. A missing Java fails the tests (it never skips
them): ``make test`` checks for it first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The process-wide SparkSession, stopped at the end of the test session."""
    from spark_backend.session import get_session, stop_session

    session = get_session()
    yield session
    stop_session()
