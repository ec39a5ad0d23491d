"""The hostile corpus' harness: run one case and classify what happened.

A :class:`Case` is a command line run in a fresh directory its ``setup`` fills (inputs,
previous outputs, planted files), in-process through the CLI's ``main()`` or, for
signals, memory limits and start-up, as a subprocess of the console script. Its
outcome is one of :data:`OUTCOMES`, checked in this order:

- ``hang``: no exit within the time limit;
- ``traceback``: a Python traceback printed or escaping ``main()``, or an exit status
  other than 0, 2, 130 and 143 (a death by signal included);
- ``data loss``: a file that existed before the run changed or vanished, other than a
  previous output that a successful run replaced;
- ``silent``: exit 0 where the case must be refused, no output where it succeeded, or
  an error line that does not name the cause the case expects;
- ``debris``: anything new left beside the output or in the temporary directory;
- ``clear error``: exit 2 (130 / 143 for a signal) with one line ``watermarks: ...``
  (argparse's usage line and its ``error:`` line count as one);
- ``OK``: exit 0 and the output in place.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

OUTCOMES = ("clear error", "OK", "data loss", "traceback", "silent", "debris", "hang")

#: Seconds a case may take before it counts as a hang (in-process: SIGALRM); a case that
#: starts Spark gets more.
TIME_LIMIT = 60
SPARK_TIME_LIMIT = 600

CONSOLE = str(Path(sys.executable).with_name("watermarks"))


class Hang(BaseException):
    """Raised by SIGALRM in an in-process case that ran past :data:`TIME_LIMIT`."""


@dataclass(frozen=True)
class Case:
    """One hostile case: ``argv`` after ``setup(root)`` ran in the fresh directory
    ``root`` (``{root}`` in ``argv`` names it); ``expect`` is ``"clear error"`` or
    ``"OK"``; ``out`` names the output directory relative to ``root`` (None: the case
    writes none). Subprocess cases give
    ``env`` additions, ``prefix`` (``prlimit ...``) and ``signal_after`` (signal,
    seconds after the entry point installed its handlers, or after ``signal_when``)."""

    name: str
    argv: Sequence[str]
    expect: str
    setup: Callable[[Path], None] = lambda root: None
    out: str | None = "out"
    subprocess: bool = False
    env: dict[str, str] = field(default_factory=dict)
    prefix: Sequence[str] = ()
    signal_after: tuple[int, float] | None = None
    needle: str = ""  # text the error line must hold
    signal_when: str = ""  # subprocess: the signal waits for this text on stderr
    time_limit: int = TIME_LIMIT  # seconds before the case counts as a hang


@dataclass
class Result:
    code: int | None
    stdout: str
    stderr: str
    escaped: BaseException | None = None


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` (not followed through symlinks): files by content."""
    found: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if os.path.islink(p):
                found[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                found[rel] = p.read_bytes() if st.st_size < 1 << 20 else f"size:{st.st_size}"
            elif p.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = "special"
    return found


def _run_in_process(case: Case, argv: list[str]) -> Result:
    from spark_backend.cli import commands

    out, err = io.StringIO(), io.StringIO()

    def alarm(signum: int, frame: object) -> None:
        raise Hang()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(case.time_limit)
    timer = None
    if case.signal_after is not None:  # this process signals itself mid-run
        sig, after = case.signal_after
        timer = threading.Timer(after, os.kill, (os.getpid(), sig))
        timer.start()
    escaped: BaseException | None = None
    code: int | None = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = commands.main(argv)
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 2
    except Hang:
        code = None
    except BaseException as exc:
        escaped = exc
    finally:
        if timer is not None:
            timer.cancel()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return Result(code, out.getvalue(), err.getvalue(), escaped)


def _run_subprocess(case: Case, root: Path, tmp: Path) -> Result:
    env = {**os.environ, "TMPDIR": str(tmp), **case.env}
    child = subprocess.Popen(
        [*case.prefix, CONSOLE, *case.argv],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen = ""
    if case.signal_when:  # read stderr up to the text (the child is killed if it hangs)
        assert child.stderr is not None
        watchdog = threading.Timer(case.time_limit, child.kill)
        watchdog.start()
        for line in child.stderr:
            seen += line
            if case.signal_when in line:
                break
        watchdog.cancel()
    if case.signal_after is not None:
        sig, after = case.signal_after
        _wait_for_handlers(child)
        try:
            child.wait(timeout=after)
        except subprocess.TimeoutExpired:
            child.send_signal(sig)
    try:
        out, err = child.communicate(timeout=case.time_limit)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        return Result(None, out, seen + err)
    return Result(child.returncode, out, seen + err)


def _wait_for_handlers(child: subprocess.Popen[str], limit: float = 30.0) -> None:
    """Until the child's SIGTERM handler is in place (the entry point's first act; until
    then the interpreter itself is starting), read from ``/proc/PID/status``."""
    deadline = time.monotonic() + limit
    bit = 1 << (signal.SIGTERM - 1)
    while child.poll() is None and time.monotonic() < deadline:
        try:
            with open(f"/proc/{child.pid}/status", encoding="ascii") as f:
                caught = next(line for line in f if line.startswith("SigCgt:"))
        except (OSError, StopIteration):
            return
        if int(caught.split()[1], 16) & bit:
            return
        time.sleep(0.002)


def _one_clear_line(stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [
        line
        for line in lines
        if line.startswith(("watermarks: ", "watermarks analyze: ", "watermarks simulate: "))
        or line.startswith("watermarks demo: ")
        or line.startswith("watermarks: error")
    ]
    return len(errors) == 1 and len(errors[0]) <= 600


def _output_paths(case: Case, root: Path) -> list[str]:
    """The output directory relative to ``root``, and where a symlink there points."""
    if case.out is None:
        return []
    found = [case.out]
    real = os.path.realpath(root / case.out)
    if os.path.islink(root / case.out) and real.startswith(str(root.resolve()) + os.sep):
        found.append(os.path.relpath(real, root.resolve()))
    return found


def classify(case: Case, root: Path, tmp: Path, before: dict[str, bytes | str], r: Result) -> str:
    """The outcome of ``case`` (see the module docstring)."""
    if r.code is None:
        return "hang"
    if r.escaped is not None or "Traceback (most recent call last)" in r.stderr:
        return "traceback"
    if r.code not in (0, 2, 130, 143):
        return "traceback"
    after = _tree(root)
    outs = _output_paths(case, root)
    replaced = r.code == 0

    def in_output(rel: str) -> bool:
        return any(rel == o or rel.startswith(o + os.sep) for o in outs)

    def made_for_output(rel: str) -> bool:  # a missing parent of the output
        return replaced and any(o.startswith(rel + os.sep) for o in outs)

    for rel, content in before.items():
        if replaced and in_output(rel):
            continue
        if after.get(rel) != content:
            return "data loss"
    if r.code == 0 and case.expect != "OK":
        return "silent"
    new = [r_ for r_ in after if r_ not in before and not in_output(r_) and not made_for_output(r_)]
    if new or any(tmp.iterdir()):
        return "debris"
    if r.code == 0:
        if case.out is not None and not (root / case.out / ".watermarks-output").is_file():
            return "silent"
        return "OK"
    if not _one_clear_line(r.stderr):
        return "traceback"
    if case.needle and case.needle not in r.stderr:
        return "silent"  # an error, but not the one naming the cause
    return "clear error"


def run_case(case: Case, base: Path) -> tuple[str, Result]:
    """Run ``case`` in a fresh directory under ``base``; its outcome and raw result."""
    root = Path(tempfile.mkdtemp(prefix="case-", dir=base))
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=base))
    case.setup(root)
    before = _tree(root)
    if case.subprocess:
        result = _run_subprocess(case, root, tmp)
    else:
        cwd = os.getcwd()
        saved = tempfile.tempdir, os.environ.get("TMPDIR")
        os.chdir(root)
        tempfile.tempdir = str(tmp)
        try:
            result = _run_in_process(case, [a.replace("{root}", str(root)) for a in case.argv])
        finally:
            os.chdir(cwd)
            tempfile.tempdir = saved[0]
    return classify(case, root, tmp, before, result), result
