"""Run Beam's runner suites on PySparkRunner and on Beam's local runners, and print the
pass counts side by side (``make conformance``).

    python -m tests.conformance.run [--suite NAME ...] [--config NAME ...] [--out DIR]

Suites (the tests ship inside the installed ``apache_beam``):

- ``fn_api``: FnApiRunnerTest, batch, as Beam's portable runners run it (the subclass in
  ``test_fn_api_runner_suite.py``); control: Beam's FnApiRunnerTest on FnApiRunner.
- ``vr_batch``: the tests marked ``it_validatesrunner`` and not ``no_sickbay_batch``,
  through ``--test-pipeline-options="--runner=..."``; control: FnApiRunner.
- ``vr_streaming``: those marked ``it_validatesrunner`` and not ``no_sickbay_streaming``,
  with ``--streaming``; control: BundleBasedDirectRunner.
- ``test_stream``: ``testing/test_stream_test.py::TestStreamTest`` with ``--streaming``;
  control: BundleBasedDirectRunner.

Each suite runs on each configuration of :mod:`tests.conformance.runners` (``default``,
and ``spark-stages``: every stage on Spark) and once on its control, one pytest process
each, with the harness (:mod:`tests.conformance.harness`): the sickbay applied, and each
test's pipeline runs recorded, so that a test whose pipelines ran on another runner is
counted as "not run on the runner", never as passed. A test that runs no pipeline (it
checks construction only) is counted apart. The exit status is 1 when a test passes on
the control and not on PySparkRunner.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conformance.harness import NO_PIPELINE, NOT_RUN
from tests.conformance.runners import CONFIGS

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def beam_root() -> Path:
    import apache_beam

    return Path(apache_beam.__file__).resolve().parent


def marked_files(marker: str) -> list[str]:
    """The test files of the installed apache_beam that carry ``marker``, except those
    of runners other than the portable ones (Dataflow's) and of ML inference, whose
    marked tests check those services."""
    root = beam_root()
    files = []
    for path in sorted(root.rglob("*_test.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("runners/dataflow/", "ml/")):
            continue
        if f"mark.{marker}" in path.read_text(errors="replace"):
            files.append(str(path))
    return files


@dataclass(frozen=True)
class Suite:
    name: str
    streaming: bool
    control: str  # the control runner's class name

    def args(self, runner: str | None) -> list[str]:
        """pytest's arguments: on PySparkRunner's configuration ``runner`` (a --runner
        value), or on the control when None."""
        root = beam_root()
        if self.name == "fn_api":
            if runner is None:
                return [
                    str(root / "runners/portability/fn_api_runner/fn_runner_test.py")
                    + "::FnApiRunnerTest"
                ]
            return [str(HERE / "test_fn_api_runner_suite.py")]
        options = f"--runner={runner or self.control}" + (" --streaming" if self.streaming else "")
        if self.name == "test_stream":
            paths = [str(root / "testing/test_stream_test.py") + "::TestStreamTest"]
            return [*paths, f"--test-pipeline-options={options}"]
        sickbay = "no_sickbay_streaming" if self.streaming else "no_sickbay_batch"
        return [
            *marked_files("it_validatesrunner"),
            "-m",
            f"it_validatesrunner and not {sickbay}",
            f"--test-pipeline-options={options}",
        ]


SUITES = {
    s.name: s
    for s in (
        Suite("fn_api", False, "FnApiRunner"),
        Suite("vr_batch", False, "FnApiRunner"),
        Suite("vr_streaming", True, "BundleBasedDirectRunner"),
        Suite("test_stream", True, "BundleBasedDirectRunner"),
    )
}


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    not_run: int = 0
    no_pipeline: int = 0
    skipped: int = 0
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.not_run


def run_one(suite: Suite, config: str | None, out: Path) -> dict[str, Any]:
    """Run ``suite`` on ``config`` (None: the control) and return the harness's report."""
    label = config or "control"
    report = out / f"{suite.name}-{label}.json"
    log = out / f"{suite.name}-{label}.log"
    runner = CONFIGS[config] if config else None
    env = dict(os.environ)
    env.update(
        CONFORMANCE_REPORT=str(report),
        CONFORMANCE_RUNNER="PySparkRunner" if config else suite.control,
        CONFORMANCE_DEFAULT_RUNNER=runner or suite.control,
        CONFORMANCE_CONFIG=config or "default",
    )
    # the suite in this folder has the harness from its conftest; Beam's files need -p
    harness = [] if suite.name == "fn_api" and config else ["-p", "tests.conformance.harness"]
    command = [
        *(sys.executable, "-m", "pytest", "-q", "--runxfail", "-p", "no:cacheprovider", *harness),
        *("--rootdir", str(ROOT), *suite.args(runner)),
    ]
    print(f"-- {suite.name} on {label}: log {log}", flush=True)
    with log.open("w") as sink:
        subprocess.run(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    if not report.exists():
        raise SystemExit(f"{suite.name} on {label} wrote no report; see {log}")
    return dict(json.loads(report.read_text()))


def test_name(nodeid: str) -> str:
    """``Class::test`` of a node id (the key runner and control runs share)."""
    parts = nodeid.split("::")
    name = "::".join(parts[-2:])
    return name.replace("PySparkRunnerTest::", "FnApiRunnerTest::")


def count(report: dict[str, Any]) -> Counts:
    counts = Counts()
    for nodeid, entry in report.items():
        kind = entry["category"]
        if kind == "passed":
            counts.passed += 1
        elif kind == "skipped":
            counts.skipped += 1
        elif kind == NO_PIPELINE:
            counts.no_pipeline += 1
        else:
            if kind == NOT_RUN:
                counts.not_run += 1
            else:
                counts.failed += 1
            reason = entry.get("reason", "")
            counts.failures[test_name(nodeid)] = reason if kind == NOT_RUN else f"{kind}: {reason}"
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", action="append", choices=list(SUITES))
    parser.add_argument("--config", action="append", choices=list(CONFIGS))
    parser.add_argument("--out", type=Path, help="where the reports and logs go")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="conformance-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    regressions = []
    for suite in (SUITES[name] for name in args.suite or SUITES):
        control_report = run_one(suite, None, out)
        control = count(control_report)
        control_passed = {
            test_name(n) for n, e in control_report.items() if e["category"] == "passed"
        }
        for config in args.config or CONFIGS:
            counts = count(run_one(suite, config, out))
            rows.append((suite.name, config, counts, control))
            for name, why in sorted(counts.failures.items()):
                mark = "control passes" if name in control_passed else "not passed on the control"
                print(f"   {config}: {name} ({mark}): {why[:200]}")
                if name in control_passed:
                    regressions.append((suite.name, config, name))
    print()
    header = (
        f"{'suite':<14}{'configuration':<15}{'PySparkRunner':>14}{'control':>10}"
        f"{'not run on runner':>19}{'no pipeline':>13}{'skipped':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, config, counts, control in rows:
        print(
            f"{name:<14}{config:<15}{f'{counts.passed}/{counts.total}':>14}"
            f"{f'{control.passed}/{control.total}':>10}{counts.not_run:>19}"
            f"{counts.no_pipeline:>13}{counts.skipped:>9}"
        )
    print(f"\nreports and logs: {out}")
    if regressions:
        print(f"{len(regressions)} test(s) pass on the control and not on PySparkRunner")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
