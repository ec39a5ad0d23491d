"""The console entry point installs its signal handlers before anything heavy loads: its
module (and the package it is exported from) imports only the standard library, so the
handlers are in place while numpy, pyarrow and Spark's modules import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spark_backend.cli import entry
from spark_backend.cli.interrupts import Terminated

HEAVY = ("numpy", "pyarrow", "pandas", "pyspark", "py4j", "apache_beam", "scipy", "matplotlib")

_PROBE = """
import signal, sys
import spark_backend.cli
from spark_backend.cli import entry, interrupts
assert spark_backend.cli.main is entry.main, spark_backend.cli.main
heavy = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[1].split(","))
interrupts.install_signals()
print(heavy, signal.getsignal(signal.SIGTERM) is interrupts.raise_terminated)
"""


def test_the_entry_point_loads_nothing_heavy_before_its_handlers() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(HEAVY)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.split() == ["[]", "True"], done.stdout + done.stderr


#: What the console script's path to the handlers may load beyond what the interpreter
#: and the script itself (``import re, sys``) already hold: the packages on the way and
#: the ``signal`` module.
ON_THE_WAY = {
    "spark_backend", "spark_backend.cli", "spark_backend.cli.entry",
    "spark_backend.cli.interrupts", "signal",
}  # fmt: skip

_CONSOLE_PATH = """
import json, re, sys
before = set(sys.modules)
from spark_backend.cli import main
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_console_path_to_the_handlers_loads_only_the_modules_on_the_way() -> None:
    """Every module loaded before the handlers widens the start-up window in which a
    signal ends the process with the interpreter's trace or none of our line."""
    done = subprocess.run(
        [sys.executable, "-c", _CONSOLE_PATH], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert loaded <= ON_THE_WAY, sorted(loaded - ON_THE_WAY)


@pytest.mark.parametrize("moment", ["install_signals", "memory_limit"])
@pytest.mark.parametrize(("signalled", "code"), [(KeyboardInterrupt, 130), (Terminated, 143)])
def test_a_signal_while_the_entry_point_starts_ends_the_run_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    moment: str,
    signalled: type[BaseException],
    code: int,
) -> None:
    """A signal raised at ``moment`` (the handlers half installed, the memory guard):
    the handlers are not installed in this process, the signal is raised in their
    place."""

    def arrives(*args: object) -> None:
        raise signalled()

    monkeypatch.setattr(entry, "enable_watchdog", lambda: None)
    monkeypatch.setattr(entry, "install_signals", lambda: None)
    monkeypatch.setattr(entry, moment, arrives)
    assert entry.main(["simulate", "--events", "10", "--out", "never"]) == code
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("watermarks: "), lines


_SWALLOWED = """
import os, signal, time
from spark_backend.cli import interrupts
interrupts.GRACE = 0.2
interrupts.enable_watchdog()
interrupts.install_signals()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
except interrupts.Terminated:
    pass  # a library that swallows the exception
time.sleep(30)
"""


def test_the_watchdog_ends_a_run_that_swallowed_the_signal() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SWALLOWED], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 143, done.stderr
    assert done.stderr.splitlines() == [
        "watermarks: terminated (SIGTERM); previous output left as it was"
    ]
