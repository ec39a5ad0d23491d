"""Peak resident memory (bytes; a process tree's as the sum of its processes'
proportional set sizes) and CPU seconds of this process tree, for the bench scripts,
and glibc's option to keep freed memory (:func:`keep_freed_memory`)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from spark_backend.session.memory import rss
from theory.memory import set_keep_freed_memory


class PeakMemory:
    """The peak resident memory (bytes) of this process and all its descendants (the
    Spark JVM and its Python workers), or of this process alone (``tree=False``),
    sampled on entering the ``with``, every 0.5 s inside it, and on leaving it. (A
    sample of the tree costs 13-20 ms of this process's CPU; the entry and exit samples
    run in the caller, outside what it times inside the ``with``, so a run shorter than
    0.5 s is not slowed by sampling; its peak is then the larger of the two.)"""

    def __init__(self, tree: bool = True) -> None:
        self.peak = 0
        #: With ``tree``: the peak of each kind of process in it (``tree_rss_by_kind``).
        self.by_kind: dict[str, int] = {}
        self._tree = tree
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._take()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self._take()

    def _take(self) -> None:
        if self._tree:
            kinds = tree_rss_by_kind(os.getpid())
            self.peak = max(self.peak, sum(kinds.values()))
            for k, v in kinds.items():
                self.by_kind[k] = max(self.by_kind.get(k, 0), v)
        else:
            self.peak = max(self.peak, rss())


def tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and its descendants (Linux /proc)."""
    return sum(tree_rss_by_kind(root).values())


def _pss(pid: int) -> int:
    """The process's proportional set size (bytes): pages it shares with others (a forked
    Python worker's with its daemon) counted in part, so a tree's sum counts them once."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"no Pss for {pid}")


def tree_rss_by_kind(root: int) -> dict[str, int]:
    """Proportional resident bytes (PSS) of process ``root`` ("driver") and of its
    descendants, summed by kind: "jvm" (java) and "workers" (anything else: Spark's Python
    workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    total: dict[str, int] = {"driver": 0, "jvm": 0, "workers": 0}
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        frontier.extend(children.get(pid, ()))
        try:
            size = _pss(pid)
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        kind = "driver" if pid == root else "jvm" if name == "java" else "workers"
        total[kind] += size
    return total


def _stats() -> dict[int, tuple[int, int]]:
    """(parent pid, CPU ticks of it and its reaped children) of every process."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # utime + stime, and cutime + cstime: the ended workers Spark waited for
            found[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))
    return found


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by process ``root`` and its live descendants (the Spark
    JVM and its Python workers: Spark's CPU is mostly theirs, not the driver's)."""
    stats = _stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, frontier = 0, [root]
    while frontier:
        pid = frontier.pop()
        frontier.extend(children.get(pid, ()))
        total += stats.get(pid, (0, 0))[1]
    return total / os.sysconf("SC_CLK_TCK")


def keep_freed_memory() -> None:
    """glibc: serve large arrays from the heap and keep freed memory for the rest of the
    process (:func:`theory.memory.set_keep_freed_memory`), so that a numpy temporary over
    32 MB is not fresh memory from the kernel (mapped and zeroed) each time; isolates the
    computation from first-touch costs. Users get the default."""
    if not set_keep_freed_memory(True):
        raise SystemExit("keeping freed memory needs glibc")
