"""The console entry point installs its signal handlers before anything heavy loads: its
module (and the package it is exported from) imports only the standard library, so the
handlers are in place while numpy, pyarrow and Spark's modules import."""

from __future__ import annotations

import subprocess
import sys

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
