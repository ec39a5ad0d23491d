"""The conformance harness: a pytest plugin for running Beam's own runner suites.

Loaded by ``-p tests.conformance.harness`` (``tests/conformance/run.py`` runs Beam's test
files with it) and by ``tests/conformance/conftest.py`` for the suites that live here.
Configured by environment variables, so that it reaches every pytest process:

- ``CONFORMANCE_RUNNER``: the runner class that must run each test's pipelines
  (``PySparkRunner``, or ``FnApiRunner`` / ``BundleBasedDirectRunner`` for the control).
  Every pipeline run is recorded (the ``run_pipeline`` of each runner Beam can pick is
  wrapped): a test that passed but ran no pipeline on that runner -- a Beam test that
  builds its own ``TestPipeline(options=...)`` or constructs FnApiRunner itself -- is
  turned into a failure, "not run on the runner", never a pass.
- ``CONFORMANCE_DEFAULT_RUNNER``: Beam's default runner (``StandardOptions.DEFAULT_RUNNER``)
  for the session: the runner of the pipelines that name none (TestStreamTest builds
  ``TestPipeline(options=StandardOptions(streaming=True))``).
- ``CONFORMANCE_REPORT``: a JSON file to write each test's outcome and runners to.

The sickbay (``sickbay.toml`` beside this file) is applied to every collected test:
each entry is skipped with its reason.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SICKBAY = Path(__file__).with_name("sickbay.toml")

#: Runner classes whose ``run_pipeline`` is recorded, as (module, class name).
RECORDED = (
    ("spark_backend.runner.runner", "PySparkRunner"),
    ("apache_beam.runners.portability.fn_api_runner.fn_runner", "FnApiRunner"),
    ("apache_beam.runners.direct.direct_runner", "BundleBasedDirectRunner"),
    ("apache_beam.runners.direct.direct_runner", "SwitchingDirectRunner"),
    ("apache_beam.runners.portability.portable_runner", "PortableRunner"),
    ("apache_beam.runners.portability.prism_runner", "PrismRunner"),
)

NOT_RUN = "not run on the runner"
NO_PIPELINE = "no pipeline"

_RAN: list[dict[str, Any]] = []
_LOCK = threading.Lock()
_RESULTS: dict[str, dict[str, Any]] = {}


def load_sickbay(path: Path = SICKBAY) -> dict[str, str]:
    """The sickbay's entries: test key -> reason (every entry must give one)."""
    data = tomllib.loads(path.read_text())
    entries = {}
    for entry in data.get("test", []):
        key, reason = entry.get("key"), entry.get("reason")
        if not key or not reason:
            raise ValueError(f"{path}: every [[test]] needs a key and a reason: {entry}")
        entries[key] = reason
    return entries


def sickbay_keys(item: Any) -> list[str]:
    """The keys a sickbay entry may name ``item`` by: ``Class::test`` for the item's
    class and each of its bases (so an entry for ``FnApiRunnerTest::test_x`` names a
    subclass's test too), and its node id from ``apache_beam/`` on."""
    name = item.originalname if hasattr(item, "originalname") else item.name
    keys = []
    cls = getattr(item, "cls", None)
    if cls is not None:
        keys.extend(f"{base.__name__}::{name}" for base in cls.__mro__)
    nodeid = item.nodeid
    if "apache_beam/" in nodeid:
        keys.append("apache_beam/" + nodeid.split("apache_beam/", 1)[1])
    keys.append(nodeid)
    return keys


def _recorded(method: Any) -> Any:
    @functools.wraps(method)
    def run_pipeline(self: Any, pipeline: Any, options: Any) -> Any:
        from apache_beam.options.pipeline_options import StandardOptions

        run = {
            "runner": type(self).__name__,
            "base": _base_name(self),
            "streaming": bool(options.view_as(StandardOptions).streaming),
        }
        if hasattr(self, "driver_stages"):
            run["driver_stages"] = bool(self.driver_stages)
        with _LOCK:
            _RAN.append(run)
        return method(self, pipeline, options)

    run_pipeline.__conformance_recorded__ = True  # type: ignore[attr-defined]
    return run_pipeline


def _base_name(runner: Any) -> str:
    names = {name for _, name in RECORDED}
    for cls in type(runner).__mro__:
        if cls.__name__ in names:
            return cls.__name__
    return type(runner).__name__


def install_recording() -> None:
    """Wrap each recorded runner class's own ``run_pipeline`` (once)."""
    import importlib

    for module_name, class_name in RECORDED:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        method = cls.__dict__.get("run_pipeline")
        if method is None or getattr(method, "__conformance_recorded__", False):
            continue
        cls.run_pipeline = _recorded(method)


def pytest_configure(config: pytest.Config) -> None:
    install_recording()
    default = os.environ.get("CONFORMANCE_DEFAULT_RUNNER")
    if default:
        from apache_beam.options.pipeline_options import StandardOptions

        StandardOptions.DEFAULT_RUNNER = default


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    sickbay = load_sickbay()
    for item in items:
        for key in sickbay_keys(item):
            if key in sickbay:
                item.add_marker(pytest.mark.skip(reason=f"sickbay: {sickbay[key]}"))
                break


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Any) -> None:
    with _LOCK:
        _RAN.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    with _LOCK:
        ran = list(_RAN)
    report.user_properties.append(("pipeline_runs", ran))
    expected = os.environ.get("CONFORMANCE_RUNNER")
    if expected and report.passed and ran and not any(r["base"] == expected for r in ran):
        others = sorted({r["runner"] for r in ran})
        report.outcome = "failed"
        report.longrepr = f"{NOT_RUN}: its pipelines ran on {', '.join(others)}, not {expected}"


def pytest_runtest_logreport(report: Any) -> None:
    if not os.environ.get("CONFORMANCE_REPORT"):
        return
    entry = _RESULTS.setdefault(report.nodeid, {"outcome": "passed", "runs": []})
    runs = dict(report.user_properties).get("pipeline_runs")
    if runs is not None:
        entry["runs"] = runs
    if report.skipped and report.when in ("setup", "call"):
        entry["outcome"] = "skipped"
        entry["reason"] = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
    elif report.failed:
        entry["outcome"] = "failed"
        text = str(report.longrepr)
        entry["reason"] = text if text.startswith(NOT_RUN) else text.strip().splitlines()[-1]


def pytest_sessionfinish(session: Any) -> None:
    path = os.environ.get("CONFORMANCE_REPORT")
    if not path or hasattr(session.config, "workerinput"):
        return
    expected = os.environ.get("CONFORMANCE_RUNNER")
    for entry in _RESULTS.values():
        entry["category"] = category(entry, expected)
    Path(path).write_text(json.dumps(_RESULTS, indent=1, sort_keys=True))


def category(entry: dict[str, Any], expected: str | None) -> str:
    """``passed``, ``failed``, ``skipped``, NOT_RUN (its pipelines ran on another runner)
    or NO_PIPELINE (it ran none: it tests construction, not a runner)."""
    if entry["outcome"] == "skipped":
        return "skipped"
    runs = entry.get("runs", [])
    if expected and runs and not any(r["base"] == expected for r in runs):
        return NOT_RUN
    if not runs and entry["outcome"] == "passed":
        return NO_PIPELINE
    return str(entry["outcome"])
