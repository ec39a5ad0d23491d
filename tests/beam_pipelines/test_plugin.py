"""The pytest plugins as a Beam author meets them: the example project in
tests/plugin_example run through pytester (each assertion's failure message shown), the
entry points, lazy Beam, and a missing emulator failing with what to install."""

from __future__ import annotations

import ast
import configparser
import os
import re
import sys
from pathlib import Path
from typing import Any

# In-process pytester runs drop the modules first imported inside them, and numpy's C core
# cannot be loaded twice: import what the example project imports here, once (and the
# direct runner's modules that tracing patches, so that it patches the ones that run).
import apache_beam.runners.direct.transform_evaluator
import apache_beam.runners.direct.watermark_manager  # noqa: F401
import pytest

import beam_pipelines.testing.builder
import beam_pipelines.testing.expect
import beam_pipelines.testing.panes
import beam_pipelines.testing.pipeline
import beam_pipelines.testing.strategies
import beam_pipelines.testing.watermarks  # noqa: F401
from beam_pipelines.emulator import Emulator

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "plugin_example"
PLUGINS = ("-p", "beam_pipelines.pytest_plugin", "-p", "spark_backend.pytest_plugin")


def _copy_example(pytester: pytest.Pytester, *names: str) -> None:
    pytester.makepyfile(**{Path(n).stem: (EXAMPLE / n).read_text() for n in names})


def test_example_transform_panes_and_their_failure_messages(pytester: pytest.Pytester) -> None:
    _copy_example(pytester, "test_my_transform.py")
    result = pytester.runpytest_inprocess(*PLUGINS, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    # the pane-by-pane diff: accumulating model against a discarding transform
    assert "assert_panes: Beam and the model differ" in out
    assert (
        "- model key='alice' window=[0s, 60s) timestamp=59.999999s ON_TIME index=1 "
        "first=False last=False value=7"
    ) in out
    assert (
        "+ beam  key='alice' window=[0s, 60s) timestamp=59.999999s ON_TIME index=1 "
        "first=False last=False value=4"
    ) in out
    # matched panes are listed too, unmarked
    assert "    key='bob' window=[0s, 60s)" in out
    # Beam's limits come first
    assert "events[1]: processing-time step of 500000 µs is not whole seconds" in out


def test_example_watermark_assertions_and_their_failure_messages(
    pytester: pytest.Pytester,
) -> None:
    _copy_example(pytester, "test_my_watermarks.py")
    result = pytester.runpytest_inprocess(*PLUGINS, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=3)
    out = result.stdout.str()
    assert "late element(s):" in out and "< watermark" in out and "when it arrived at" in out
    assert "watermark goes back 1 time(s):" in out
    assert "[2]: 1970-01-01T00:00:05Z -> 1970-01-01T00:00:04Z" in out
    assert "window [0, 60000000) µs of key 'k' (ON_TIME) did not fire at processing time " in out
    assert "key='k' ON_TIME index=1 at 15000000 µs" in out


def test_example_pipeline_is_checked_whole_with_one_expectation(pytester: pytest.Pytester) -> None:
    """The issue's pipeline (a bot filter fed by a side input, early and late firings, a
    Sessions branch): one assert_pipeline call and one expect_panes, in under 25 lines.
    Its planted-lateness property test is left out here (it fails on purpose)."""
    text = (EXAMPLE / "test_my_pipeline.py").read_text()
    (test,) = [
        f
        for f in ast.parse(text).body
        if isinstance(f, ast.FunctionDef) and f.name == "test_clicks"
    ]
    assert test.end_lineno is not None and test.end_lineno - test.lineno + 1 < 25
    assert text.count("assert_pipeline(") == 1 and text.count("expect_panes(") == 1
    _copy_example(pytester, "test_my_pipeline.py")
    result = pytester.runpytest_inprocess(*PLUGINS, "-p", "no:cacheprovider", "-k", "test_clicks")
    result.assert_outcomes(passed=1, deselected=1)


def _readme_tests() -> dict[str, str]:
    """The README's pytest files: its ``py`` blocks that start with ``# test_<name>.py``."""
    blocks = re.findall(r"```py\n(# (test_\w+)\.py.*?)```", (ROOT / "README.md").read_text(), re.S)
    return {name: text for text, name in blocks}


def test_readme_examples_and_the_example_pubsub_test_pass(
    pytester: pytest.Pytester, pubsub_emulator: Emulator
) -> None:
    """The README's two pytest files and the example project's Pub/Sub test, with no
    project-internal imports, pass under the plugins (their session starts its own
    emulator, on another free port)."""
    readme = _readme_tests()
    assert set(readme) == {"test_clicks", "test_pubsub_scores"}
    for name, text in readme.items():
        imports = re.findall(r"^(?:from|import) ([\w.]+)", text, re.M)
        ours = [m for m in imports if m.split(".")[0] in ("beam_pipelines", "theory")]
        assert set(ours) <= {"beam_pipelines", "beam_pipelines.testing"}, (name, ours)
    _copy_example(pytester, "test_my_pubsub.py")
    pytester.makepyfile(**readme)
    result = pytester.runpytest_inprocess(*PLUGINS, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    # the outer session's emulator and environment are untouched
    assert os.environ["PUBSUB_EMULATOR_HOST"] == pubsub_emulator.host


def _entry_points(tmp: Path) -> Path:
    """A dist-info carrying setup.cfg's pytest11 entry points, as an install makes."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    body = cfg["options.entry_points"]["pytest11"]
    dist = tmp / "site" / "dataflow_watermarks_probe-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dataflow-watermarks-probe\n")
    (dist / "entry_points.txt").write_text(f"[pytest11]\n{body.strip()}\n")
    return tmp / "site"


def test_installed_entry_points_load_the_plugins_without_importing_beam(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: Any
) -> None:
    """With the entry points installed (and no -p), the fixtures exist, an unrelated test
    does not import apache_beam or pyspark, and -p of the same plugins does not clash."""
    site = _entry_points(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))
    pytester.makepyfile(
        test_unrelated="""
        import sys

        def test_no_beam(request):
            assert "apache_beam" not in sys.modules
            assert "pyspark" not in sys.modules
            plugins = request.config.pluginmanager
            assert plugins.has_plugin("beam_pipelines.pytest_plugin")
            assert plugins.has_plugin("spark_backend.pytest_plugin")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    again = pytester.runpytest_subprocess(*PLUGINS, "-p", "no:cacheprovider")
    again.assert_outcomes(passed=1)


def test_a_missing_emulator_fails_with_what_to_install(
    pytester: pytest.Pytester, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_LAUNCHER", str(pytester.path / "no-such-emulator"))
    pytester.makepyfile(
        test_needs_pubsub="""
        def test_it(pubsub_emulator):
            pass
        """
    )
    result = pytester.runpytest_inprocess(*PLUGINS, "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert "no-such-emulator is not an executable" in out
    assert "google-cloud-cli-pubsub-emulator" in out
    assert "gcloud components install pubsub-emulator" in out
    assert "skipped" not in out


def test_project_fixtures_do_not_shadow_the_plugins() -> None:
    """The project's conftests define no fixture named as a plugin fixture."""
    names = {"pubsub_emulator", "test_stream", "spark"}
    for conftest in (ROOT / "tests").rglob("conftest.py"):
        text = conftest.read_text()
        for name in names:
            assert f"def {name}(" not in text, f"{conftest} redefines the plugin's {name}"
    assert sys.modules.get("beam_pipelines.pytest_plugin") is not None
