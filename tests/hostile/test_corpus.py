"""The hostile corpus (``cases.py``) through one harness (``harness.py``): every case must
end as it expects, a clear error or OK; a traceback, data loss, a silent wrong result,
debris or a hang fails it. Most run in-process through the CLI's ``main()``; signals,
memory limits and start-up run as subprocesses of the console script."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.hostile.cases import corpus_in_process, corpus_subprocess
from tests.hostile.harness import OUTCOMES, Case, run_case

IN_PROCESS = corpus_in_process()
SUBPROCESS = corpus_subprocess()


def _check(case: Case, base: Path) -> None:
    outcome, result = run_case(case, base)
    assert outcome in OUTCOMES
    assert outcome == case.expect, (
        f"{case.name}: {outcome} (expected {case.expect}); exit {result.code}\n"
        f"stderr: {result.stderr[-1500:]}\nescaped: {result.escaped!r}"
    )


@pytest.fixture
def base(tmp_path: Path):
    yield tmp_path
    for dirpath, dirnames, _ in os.walk(tmp_path):  # read-only directories of a case
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o755)
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.name for c in IN_PROCESS])
def test_in_process(case: Case, base: Path) -> None:
    _check(case, base)


@pytest.mark.parametrize("case", SUBPROCESS, ids=[c.name for c in SUBPROCESS])
def test_subprocess(case: Case, base: Path) -> None:
    _check(case, base)


def test_the_corpus_is_large_and_holds_the_issue_cases() -> None:
    names = [c.name for c in IN_PROCESS + SUBPROCESS]
    assert len(names) >= 200 and len(set(names)) == len(names)
    for needed in (
        "issue:all-rows-bad-skip", "issue:simulate-trace-into-its-output",
        "issue:simulate-trace-dir-out-inside", "issue:time-unit-us-near-max",
        "option:simulate:--events " + str(10**30), "option:demo:--events " + str(10**30),
        "input:fifo:analyze", "input:dev-zero-link:analyze", "out:read-only-empty:simulate",
        "startup:JAVA_HOME-nonexistent", "signal:INT@0.0s:simulate", "signal:TERM@0.3s:simulate",
        "memory:150MB:analyze", "memory:300MB:simulate", "issue:ctrl-c-during-analyze-spark",
    ):  # fmt: skip
        assert needed in names, needed
