"""The hostile corpus: input kinds x commands, ``--out`` hazards x commands, bad options,
and the cases that need their own process (signals, memory limits, start-up).

Each case names what it expects: ``OK`` or ``clear error`` (the harness's other outcomes
are findings). Inputs are tiny, so a run costs a fraction of a second.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.hostile.harness import SPARK_TIME_LIMIT, Case

MARKER = ".watermarks-output"
S = 1_000_000  # µs
MAX_US = 9_223_372_036_854_775_000  # Beam's MAX_TIMESTAMP (µs)
GOOD_ROWS = [(i * S, i * S + (i % 7) * S // 3) for i in range(40)]

Setup = Callable[[Path], None]


def csv_text(rows: Sequence[tuple[object, object]], header: str = "event_time,arrival_time") -> str:
    return header + "\n" + "".join(f"{e},{a}\n" for e, a in rows)


def write(name: str, text: str | bytes) -> Setup:
    def setup(root: Path) -> None:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode() if isinstance(text, str) else text)

    return setup


def parquet(name: str, columns: dict[str, pa.Array]) -> Setup:
    def setup(root: Path) -> None:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), root / name)

    return setup


def both(*setups: Setup) -> Setup:
    def setup(root: Path) -> None:
        for s in setups:
            s(root)

    return setup


def fifo(name: str) -> Setup:
    return lambda root: os.mkfifo(root / name)


def link(name: str, target: str) -> Setup:
    return lambda root: os.symlink(target, root / name)


def mkdir(name: str, mode: int = 0o755) -> Setup:
    def setup(root: Path) -> None:
        (root / name).mkdir(parents=True)
        os.chmod(root / name, mode)

    return setup


def previous(name: str) -> Setup:
    """A previous output of the command line at ``name``."""
    return both(write(f"{name}/{MARKER}", "x"), write(f"{name}/index.html", "old"))


GOOD = csv_text(GOOD_ROWS)
a_int = pa.array([e for e, _ in GOOD_ROWS], pa.int64())
b_int = pa.array([a for _, a in GOOD_ROWS], pa.int64())

#: Input kinds: name -> (setup making ``in.*``, the path given, expected, needle).
INPUTS: dict[str, tuple[Setup, str, str, str]] = {
    "csv": (write("t.csv", GOOD), "t.csv", "OK", ""),
    "parquet": (parquet("t.parquet", {"event_time": a_int, "arrival_time": b_int}),
                "t.parquet", "OK", ""),
    "csv-dir": (both(write("d/a.csv", csv_text(GOOD_ROWS[:20])),
                     write("d/b.csv", csv_text(GOOD_ROWS[20:])), write("d/_SUCCESS", "")),
                "d", "OK", ""),
    "keys-html": (write("t.csv", "event_time,arrival_time,key\n" + "".join(
        f"{e},{a},<script>{i % 3}</script>\n" for i, (e, a) in enumerate(GOOD_ROWS))),
                  "t.csv", "OK", ""),
    "unicode-name": (write("tráce ✓.csv", GOOD), "tráce ✓.csv", "OK", ""),
    "crlf": (write("t.csv", GOOD.replace("\n", "\r\n")), "t.csv", "OK", ""),
    "bom": (write("t.csv", "\ufeff" + GOOD), "t.csv", "OK", ""),
    "empty-file": (write("t.csv", ""), "t.csv", "clear error", ""),
    "header-only": (write("t.csv", "event_time,arrival_time\n"), "t.csv", "clear error", ""),
    "missing-column": (write("t.csv", "event_time\n1\n2\n"), "t.csv", "clear error",
                       "arrival_time"),
    "bad-row": (write("t.csv", GOOD + "x,y\n"), "t.csv", "clear error", "row 40"),
    "ragged": (write("t.csv", GOOD + "1,2,3\n"), "t.csv", "clear error", ""),
    "duplicate-columns": (write("t.csv", "event_time,arrival_time,event_time\n1,2,3\n"),
                          "t.csv", "clear error", ""),
    "not-utf8": (write("t.csv", b"event_time,arrival_time\n1,2\n\xff\xfe,3\n"),
                 "t.csv", "clear error", ""),
    "binary-csv": (write("t.csv", bytes(range(256)) * 4), "t.csv", "clear error", ""),
    "garbage-parquet": (write("t.parquet", b"PAR1" + b"\0" * 64), "t.parquet",
                        "clear error", ""),
    "txt-extension": (write("t.txt", GOOD), "t.txt", "clear error", ""),
    "fifo": (fifo("t.csv"), "t.csv", "clear error", "FIFO"),
    "dev-zero-link": (link("t.csv", "/dev/zero"), "t.csv", "clear error", "character device"),
    "broken-link": (link("t.csv", "nowhere.csv"), "t.csv", "clear error", "broken symbolic"),
    "missing": (lambda root: None, "nope.csv", "clear error", "no such file"),
    "empty-dir": (mkdir("d"), "d", "clear error", ""),
    "hidden-only-dir": (write("d/.a.csv", GOOD), "d", "clear error", ""),
    "epoch-seconds": (write("t.csv", csv_text([(1_700_000_000 + i, 1_700_000_001 + i)
                                               for i in range(40)])),
                      "t.csv", "clear error", "--time-unit"),
    "beyond-range": (write("t.csv", csv_text([(1, 2), (3, 9_223_372_036_854_775_001)])),
                     "t.csv", "clear error", "MAX_TIMESTAMP"),
    "int64-overflow": (write("t.csv", csv_text([(1, 2), (3, 2**64)])), "t.csv",
                       "clear error", ""),
    "nan-times": (write("t.csv", csv_text([(1, 2), ("nan", 3)])), "t.csv", "clear error", ""),
    "huge-field": (write("t.csv", csv_text([(1, 2), ("9" * 5000, 3)])), "t.csv",
                   "clear error", ""),
    "unsupported-scheme": (lambda root: None, "ftp://example.invalid/t.csv", "clear error",
                           "unsupported scheme"),
}

#: ``--out`` hazards: name -> (setup, --out value, expected, needle). The input is
#: ``t.csv`` (made by each case) where the command reads one.
OUTS: dict[str, tuple[Setup, str, str, str]] = {
    "fresh": (lambda root: None, "out", "OK", ""),
    "nested-fresh": (lambda root: None, "a/b/out", "OK", ""),
    "previous-output": (previous("out"), "out", "OK", ""),
    "empty-dir": (mkdir("out"), "out", "OK", ""),
    "symlink-to-previous": (both(previous("real"), link("out", "real")), "out", "OK", ""),
    "existing-file": (write("out", "mine"), "out", "clear error", "existing file"),
    "foreign-dir": (write("out/mine.txt", "keep"), "out", "clear error", "neither empty"),
    "current-dir": (lambda root: None, ".", "clear error", "current directory"),
    "parent-of-cwd": (lambda root: None, "..", "clear error", "current directory"),
    "root": (lambda root: None, "/", "clear error", "root directory"),
    "empty-string": (lambda root: None, "", "clear error", "--out is empty"),
    "parent-is-file": (write("f", "mine"), "f/out", "clear error", "is a file"),
    "read-only-empty": (mkdir("out", 0o555), "out", "clear error", "read-only"),
    "half-legacy": (write("out/index.html", "mine"), "out", "clear error", "neither empty"),
    "symlink-to-foreign": (both(write("real/mine.txt", "keep"), link("out", "real")), "out",
                           "clear error", "neither empty"),
    "is-the-input": (lambda root: None, "t.csv", "clear error", ""),
}

#: A command line per command that reads ``t.csv`` (or nothing) and writes ``--out``.
COMMANDS: dict[str, list[str]] = {
    "analyze": ["analyze", "t.csv", "--engine", "local", "--systems", "none"],
    "analyze-skip": ["analyze", "t.csv", "--engine", "local", "--on-bad-rows", "skip-and-report"],
    "simulate": ["simulate", "--events", "60", "--engine", "local"],
    "simulate-trace": ["simulate", "--trace", "t.csv", "--engine", "local"],
    "demo": ["demo", "--events", "60", "--engine", "local", "--systems", "none"],
}
READERS = ("analyze", "analyze-skip", "simulate-trace")

#: Options that must be refused before any work: (command, extra args, needle).
BAD_OPTIONS: list[tuple[str, list[str], str]] = [
    *[(c, ["--events", v], "--events") for c in ("simulate", "demo")
      for v in ("0", "-5", str(10**30), "1000000000001")],
    *[(c, ["--events", "abc"], "invalid int") for c in ("simulate", "demo")],
    *[(c, ["--seed", v], "--seed") for c in ("simulate", "demo", "analyze")
      for v in ("-1", str(2**64))],
    *[(c, ["--window", v], "") for c in ("demo", "analyze") for v in ("0", "x", "-1m", "")],
    *[(c, ["--strategies", v], "") for c in ("demo", "analyze")
      for v in ("", ",", "bogus:1", "bounded:1m,bounded:1m")],
    *[(c, ["--master", v], "--master") for c in ("demo", "analyze", "simulate")
      for v in ("mesos://h:1", "local[x]", "")],
    *[(c, ["--conf", v], "--conf") for c in ("demo", "analyze", "simulate")
      for v in ("novalue", "=x")],
    ("simulate", ["--partitions", "0"], "--partitions"),
    ("simulate", ["--blocks", "0"], "--blocks"),
    ("simulate", ["--blocks", "99999999"], "--blocks"),
    ("simulate-trace", ["--blocks", "2"], "--blocks"),
    ("simulate", ["--watermark", "bogus"], ""),
    ("simulate", ["--windowing", "sessions:1m"], "apply to --trace"),
    ("simulate", ["--time-unit", "us"], "apply to --trace"),
    ("simulate-trace", ["--windowing", "bogus:1"], ""),
    ("simulate-trace", ["--allowed-lateness", "-1m"], ""),
    ("analyze", ["--time-unit", "weeks"], "invalid choice"),
    ("analyze", ["--on-bad-rows", "ignore"], "invalid choice"),
    ("analyze", ["--engine", "gpu"], "invalid choice"),
    ("analyze", ["--systems", "storm"], ""),
    ("analyze", ["--allowed-lateness", "-5s"], ""),
    ("analyze", ["--strict"], ""),  # t.csv has rows arriving at their event time: OK below
    *[(c, ["--seeds", v], "--seeds") for c in ("simulate", "demo") for v in ("0", "-2")],
    ("simulate-trace", ["--seeds", "2"], "--seeds"),
    *[("analyze", ["--bootstrap", v], "--bootstrap") for v in ("0", "-1")],
    ("demo", ["--save-trace", "out/t.parquet"], "inside --out"),
    ("demo", ["--save-trace", "t.csv"], ".parquet"),
    ("demo", ["--save-trace", "t.csv/x.parquet"], "--save-trace"),
]


#: Row-level faults that ``--on-bad-rows skip-and-report`` skips (the run then succeeds).
SKIPPABLE = ("bad-row", "nan-times", "huge-field", "int64-overflow", "beyond-range")

#: Successful analyze runs cost seconds (the report's plots): these input kinds run it,
#: the other good kinds run ``simulate --trace``, which reads them the same way.
ANALYZE_OK = ("keys-html",)


def corpus_in_process() -> list[Case]:
    cases: list[Case] = []
    for kind, (setup, path, expect, needle) in INPUTS.items():
        for command in READERS:
            if command != "simulate-trace" and expect == "OK" and kind not in ANALYZE_OK:
                continue
            if command == "analyze-skip" and kind in SKIPPABLE:
                continue
            argv = [path if a == "t.csv" else a for a in COMMANDS[command]]
            cases.append(Case(f"input:{kind}:{command}", [*argv, "--out", "out"], expect, setup,
                              needle=needle))  # fmt: skip
    for hazard, (setup, out, expect, needle) in OUTS.items():
        for command, argv in COMMANDS.items():
            if expect == "OK" and command not in ("simulate", "simulate-trace"):
                continue
            why = needle
            if hazard == "is-the-input":  # t.csv: the input, or else an existing file
                why = "is the input" if command in READERS else "existing file"
            make = both(write("t.csv", GOOD), setup)
            cases.append(Case(f"out:{hazard}:{command}", [*argv, "--out", out], expect, make,
                              out=out if expect == "OK" else None, needle=why))  # fmt: skip
    for command, extra, needle in BAD_OPTIONS:
        argv = [*COMMANDS[command], *extra, "--out", "out"]
        expect = "OK" if extra == ["--strict"] else "clear error"
        cases.append(Case(f"option:{command}:{' '.join(extra) or 'empty'}", argv, expect,
                          write("t.csv", GOOD), needle=needle))  # fmt: skip
    cases += [
        Case("issue:all-rows-bad-skip", ["analyze", "t.csv", "--engine", "local",
             "--on-bad-rows", "skip-and-report", "--out", "out"], "clear error",
             write("t.csv", "event_time,arrival_time\nx,y\nz,w\n"), needle="every row is bad"),
        Case("issue:simulate-trace-into-its-output", ["simulate", "--trace", "out/t.csv",
             "--engine", "local", "--out", "out"], "clear error",
             both(previous("out"), write("out/t.csv", GOOD)), needle="holds the input"),
        Case("issue:simulate-trace-dir-out-inside", ["simulate", "--trace", "in", "--engine",
             "local", "--out", "in/sim"], "clear error", write("in/t.csv", GOOD),
             needle="inside the input"),
        Case("issue:time-unit-us-near-max", ["analyze", "t.csv", "--engine", "local",
             "--time-unit", "us", "--out", "out"], "clear error",
             write("t.csv", csv_text([(1, 2), (MAX_US, MAX_US + 1)])),
             needle="Beam's timestamp range"),
        Case("issue:time-unit-us-inside-range-ok", ["simulate", "--trace", "t.csv", "--engine",
             "local", "--time-unit", "us", "--out", "out"], "OK",
             write("t.csv", csv_text([(9_223_372_036_000_000_000 + S * i,
                                       9_223_372_036_000_000_000 + S * i + 5)
                                      for i in range(1, 30)]))),
    ]
    return cases


def _console(name: str, argv: list[str], expect: str, setup: Setup = lambda root: None,
             **kw: object) -> Case:
    return Case(name, argv, expect, setup, subprocess=True, **kw)  # type: ignore[arg-type]


def corpus_subprocess() -> list[Case]:
    sim = ["simulate", "--events", "200000", "--engine", "local", "--out", "out"]
    ana = ["analyze", "t.csv", "--engine", "local", "--out", "out"]
    cases = []
    for sig, code in ((signal.SIGINT, "INT"), (signal.SIGTERM, "TERM")):
        # from the handlers' first moment (the interpreter and the packages on the way
        # are all that ran before them) through the imports, then simulating
        for after in (0.0, 0.005, 0.02, 0.05, 0.1, 0.3, 1.5):
            cases.append(_console(f"signal:{code}@{after}s:simulate", sim, "clear error",
                                  previous("out"), signal_after=(sig, after),
                                  needle="previous output left"))  # fmt: skip
    for mb in (150, 200, 300):
        for name, argv in (("simulate", sim), ("analyze", ana)):
            cases.append(_console(f"memory:{mb}MB:{name}", argv, "clear error",
                                  write("t.csv", GOOD), prefix=("prlimit", f"--as={mb}000000"),
                                  needle="not enough memory"))  # fmt: skip
    cases.append(_console("startup:JAVA_HOME-nonexistent", ["analyze", "t.csv", "--engine",
                          "spark", "--out", "out"], "clear error", write("t.csv", GOOD),
                          env={"JAVA_HOME": "/nonexistent"}, needle="JAVA_HOME"))  # fmt: skip
    cases.append(_console("issue:ctrl-c-during-analyze-spark", ["analyze", "t.csv", "--engine",
                          "spark", "--systems", "none", "--out", "out"], "clear error",
                          both(previous("out"), write("t.csv", GOOD)), signal_when="Spark session",
                          signal_after=(signal.SIGINT, 0.5), needle="interrupted",
                          time_limit=SPARK_TIME_LIMIT))  # fmt: skip
    small = ["simulate", "--events", "3000", "--engine", "local", "--out", "out"]
    cases.append(_console("startup:file-size-limit", small, "clear error", previous("out"),
                          prefix=("prlimit", "--fsize=2000"), needle=""))  # fmt: skip
    return cases

