"""Bad-input handling, tallied by running the cases (not a speed benchmark).

Runs every file of the bad-input corpus (``tests/data/bad/``) through both readers
(theory's :func:`read_trace`, Spark's :func:`read_trace_df`), as a local path and as a
``file://`` URI, and then the command line (``analyze``, in this process, on the local
and the Spark engine) on every corpus file and on the bad options and ``--out`` cases.
Each case is classified:

- *same*: both readers return the same rows, or refuse with the same message;
- *clear error*: the CLI exits 2 with one line ``watermarks: error: ...``;
- *traceback*: an exception other than the readers' errors, or "Traceback" on stderr;
- *silent wrong*: the readers disagree (rows, or accept one and refuse the other), or a
  refused file is accepted by the CLI, or the two engines' ``strategies.csv`` differ;
- *data loss*: the previous output (a marked report directory) or the input changed;
- *debris*: any other file left beside them.

Prints one line per case that is not as it should be, then the totals (``--record``
appends the totals to ``bench/results/hardening_tally.json``).

    .venv/bin/python bench/hardening_tally.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
from pathlib import Path

from record import Recorder, add_record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spark_backend.cli import commands as cli  # noqa: E402
from spark_backend.cli.atomic import MARKER  # noqa: E402
from theory.data.errors import TraceError  # noqa: E402
from theory.data.io import read_trace  # noqa: E402

BAD = ROOT / "tests" / "data" / "bad"
#: Corpus files both readers must read (all others they must refuse alike); the CLI
#: accepts them too, except window_overflow.csv, whose windows all end past
#: MAX_TIMESTAMP (refused by name: no watermark could close them).
ACCEPTED = {
    "bom.csv",
    "early_arrival.csv",
    "far_past.csv",
    "na_keys.csv",
    "quoted_newline.csv",
    "names",
    "ns_tz.parquet",
    "ns_timestamps.csv",
    "window_overflow.csv",
}
OPTION_CASES = [
    ["foo://bar/x.csv"],
    ["bom.csv", "--master", "bogus://x"],
    ["early_arrival.csv", "--strict"],
    ["window_overflow.csv", "--window", "1h"],
    ["bom.csv", "--window", str(2**63 - 1)],
    ["bom.csv", "--strategies", "bounded:100000000000000000h"],
    ["bom.csv", "--strategies", "perfect,sometimes"],
    ["bom.csv", "--seed", "-1"],
    ["bom.csv", "--conf", "novalue"],
    ["bom.csv", "--time-unit", "ms", "--window", "0s"],
    ["bom.csv", "--allowed-lateness", "1s"],
    ["/nonexistent/trace.csv"],
]


class Tally:
    def __init__(self) -> None:
        self.counts = dict.fromkeys(
            ("cases", "as expected", "clear errors", "tracebacks", "silent wrong",
             "data loss", "debris"), 0)

    def add(self, what: str, **flags: bool) -> None:
        self.counts["cases"] += 1
        bad = [k for k in ("tracebacks", "silent wrong", "data loss", "debris") if flags.get(k)]
        for k in bad:
            self.counts[k] += 1
        if flags.get("clear"):
            self.counts["clear errors"] += 1
        if bad:
            print(f"  NOT AS IT SHOULD BE: {what}: {', '.join(bad)}", flush=True)
        else:
            self.counts["as expected"] += 1
            print(f"  ok: {what}", flush=True)


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _read(reader, path: str) -> tuple[str, object]:
    try:
        trace, _ = reader(path)
    except (TraceError, ValueError, FileNotFoundError) as err:
        return "refused", str(err)
    except Exception as err:  # a traceback is what we count
        return "traceback", f"{type(err).__name__}: {err}"
    return "read", sorted(zip(trace.event_time.tolist(), trace.arrival_time.tolist(),
                              [str(k) for k in trace.key], trace.value.tolist(), strict=True))


def readers(spark, tally: Tally) -> None:
    from spark_backend.traces.collect import to_trace
    from spark_backend.traces.read import read_trace_df

    def spark_read(path: str):
        df, report = read_trace_df(spark, path)
        return to_trace(df), report

    for case in sorted(p.name for p in BAD.iterdir() if p.name != "make_corpus.py"):
        for shown in (str(BAD / case), (BAD / case).as_uri()):
            theirs, ours = _read(read_trace, shown), _read(spark_read, shown)
            tb = "traceback" in (theirs[0], ours[0])
            wrong = theirs != ours or (theirs[0] == "read") != (case in ACCEPTED)
            tally.add(f"readers {shown}: theory {theirs[0]}, spark {ours[0]}",
                      tracebacks=tb, **{"silent wrong": wrong and not tb},
                      clear=theirs[0] == ours[0] == "refused")


def command_line(tally: Tally, engine: str, work: Path) -> dict[str, bytes]:
    """Every corpus file and bad option through ``analyze --engine ENGINE``; returns the
    accepted files' strategies tables (to compare the engines)."""
    tables: dict[str, bytes] = {}
    cases = [[c] for c in sorted(p.name for p in BAD.iterdir() if p.name != "make_corpus.py")]
    cases += [[(BAD / "names").as_uri()], [(BAD / "ragged.csv").as_uri()]]
    cases += OPTION_CASES
    for case in cases:
        argv = [str(BAD / case[0]) if (BAD / case[0]).exists() else case[0], *case[1:]]
        name = Path(case[0]).name
        accepted = name in ACCEPTED - {"window_overflow.csv"} and len(case) == 1
        d = work / f"{engine}-{len(tables)}-{name}"
        out = d / "out"
        out.mkdir(parents=True)
        (out / MARKER).write_text("")
        (out / "index.html").write_text("the previous report")
        before, corpus = _tree(out), _tree(BAD)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = cli.main(["analyze", "--out", str(out), "--engine", engine,
                                 "--strategies", "perfect,bounded:1s", "--window", "1s",
                                 *argv])  # the case's own options come last, and win
            except SystemExit as e:  # argparse refusing an option value: exit 2, usage
                code = int(e.code or 0)
        text = err.getvalue()
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("[")]
        flags = {
            "tracebacks": "Traceback" in text,
            "data loss": _tree(BAD) != corpus or (code != 0 and _tree(out) != before),
            "debris": any(p.name != "out" for p in d.iterdir())
            or any(p.name.startswith(".") and p.name != MARKER for p in out.iterdir()),
        }
        if accepted:
            ok = code == 0 and (out / "strategies.csv").is_file()
            if ok:
                tables[name] = (out / "strategies.csv").read_bytes()
            tally.add(f"cli {engine} {argv}: exit {code} {lines[-1:]}",
                      **flags, **{"silent wrong": not ok})
        else:
            clear = code == 2 and (
                (len(lines) == 1 and lines[0].startswith("watermarks: error: "))
                or lines[-1].startswith("watermarks analyze: error: ")  # argparse's usage
            )
            tally.add(f"cli {engine} {argv}: exit {code}: {lines[-1:]}",
                      **flags, **{"silent wrong": code == 0}, clear=clear)
            if not clear and code != 0:
                print(f"  unclear: {argv}: {lines}")
        shutil.rmtree(d)
    return tables


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--parts", default="readers,cli", help="readers, cli or both")
    add_record(parser)
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    from spark_backend.session.session import get_session

    spark = get_session(args.master, {"spark.ui.enabled": "false"})
    tally = Tally()
    if "readers" in args.parts:
        readers(spark, tally)
        print("readers:", tally.counts, flush=True)
    with tempfile.TemporaryDirectory(prefix="tally-") as tmp:
        if "cli" not in args.parts:
            recorder.save(dict(tally.counts))
            return 0
        local = command_line(tally, "local", Path(tmp))
        on_spark = command_line(tally, "spark", Path(tmp))
        for name in sorted(local):
            tally.add(f"engines agree on {name}",
                      **{"silent wrong": local[name] != on_spark.get(name)})
    for k, v in tally.counts.items():
        print(f"{k}: {v}")
    spark.stop()
    recorder.save(dict(tally.counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
