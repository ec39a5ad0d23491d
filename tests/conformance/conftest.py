"""The conformance harness (:mod:`tests.conformance.harness`) for the suites in this
folder: the sickbay applied, and every test checked to have run on PySparkRunner."""

import os

from tests.conformance.harness import (  # noqa: F401  (hooks, found by name)
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_runtest_setup,
    pytest_sessionfinish,
)

os.environ.setdefault("CONFORMANCE_RUNNER", "PySparkRunner")
