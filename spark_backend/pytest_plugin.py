"""pytest plugin (entry point ``pytest11``): the ``spark`` fixture.

``spark`` is the process-wide SparkSession of :func:`spark_backend.session.session.get_session`
(local mode and the session module's defaults; ``SPARK_REMOTE`` selects Spark Connect),
built once per test session and stopped at its end. A process runs one SparkContext, so
every test shares it. Nothing here imports pyspark until a test asks for ``spark``.

Under pytest-xdist every worker process builds its own session; the driver memory the
session module gives one local process (half the RAM) is then split between the workers.

Beam's own tests (the ``*_test.py`` files of the installed ``apache_beam``, which ships
no ``conftest.py`` or ``pytest.ini``) run here as in Beam's repository: the
``--test-pipeline-options`` option that Beam's repo-level conftest registers (given, it
becomes ``TestPipeline``'s options and turns on Beam's additional type checks, as there),
and Beam's markers, registered so that ``--strict-markers`` accepts them and ``-m``
selects by them (``-m "it_validatesrunner and not no_sickbay_batch"``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

#: Beam's pytest markers (from its pytest.ini) that its shipped tests carry.
BEAM_MARKERS = {
    "it_validatesrunner": "collect for ValidatesRunner integration test runs",
    "it_postcommit": "collect for post-commit integration test runs",
    "no_sickbay_batch": "run without sickbay-batch",
    "no_sickbay_streaming": "run without sickbay-streaming",
    "sickbay_direct": "run without sickbay-direct",
    "uses_dill": "tests that need the dill pickler",
    "no_xdist": "run without pytest-xdist plugin",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--test-pipeline-options",
        help="Options to use in test pipelines (Beam's TestPipeline). NOTE: Tests may "
        "ignore some or all of these options.",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in BEAM_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")
    options = config.getoption("test_pipeline_options", default=None)
    if options:
        from apache_beam.options import pipeline_options
        from apache_beam.testing.test_pipeline import TestPipeline

        TestPipeline.pytest_test_pipeline_options = options
        pipeline_options.enable_all_additional_type_checks()


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
