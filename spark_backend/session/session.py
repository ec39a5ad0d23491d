"""The one place that builds the SparkSession.

:func:`get_session` returns a session shared by the whole process (Spark allows one
SparkContext per JVM, and a session takes ~10 s to start). The defaults suit a laptop
and small to medium traces:

- ``local[*,4]`` unless ``master`` (``--master``) is given: a failed task is tried up
  to 4 times, as on a cluster (:func:`default_master`);
- every file of the run (Spark's ``spark-*`` / ``blockmgr-*`` directories, the JVM's
  temporary files, the log4j2 properties) in a private directory of this process,
  removed at its exit; no ``hsperfdata_<user>``; in local mode the driver binds and
  advertises 127.0.0.1 (:func:`private_settings`);
- no web UI, no console progress bar, no JVM logs and no py4j tracebacks unless the
  ``spark_backend`` logger is enabled for DEBUG (then the JVM's errors), or
  :func:`set_jvm_log_level` chose (:mod:`~spark_backend.session.quiet_logs`);
- UTC session time zone (every timestamp in the toolkit is µs since the epoch, UTC);
- few shuffle partitions in local mode (two per core), adaptive execution on;
- ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` set to the running interpreter;
- in local mode the driver JVM (which is also the executor) gets half the RAM, at most
  16 GiB, unless ``spark.driver.memory`` is given;
- the driver JVM starts with :mod:`spark_backend.session.jvm_start`'s options (a class-data
  archive built by the first session) unless ``spark.driver.extraJavaOptions`` is given.

``conf`` (``--conf key=value``) overrides any default. When ``SPARK_REMOTE`` is set (or
``master`` starts with ``sc://``) a Spark Connect session is returned instead; then only
runtime ``spark.sql.*`` settings apply and no local Java is needed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from spark_backend.session import jvm_start
from spark_backend.session.quiet_logs import default_jvm_log_level, quiet_py4j
from theory.data.private import run_dir

__all__ = [
    "JAVA_MIN_VERSION",
    "LOCAL_TASK_ATTEMPTS",
    "JavaNotFoundError",
    "check_java",
    "default_conf",
    "default_master",
    "find_java",
    "get_session",
    "parse_conf",
    "private_settings",
    "set_jvm_log_level",
    "stop_session",
    "warm_session",
]

#: Spark 4 runs on Java 17 or newer.
JAVA_MIN_VERSION: Final[int] = 17

_INSTALL_HINT: Final[str] = (
    "Install a Java 17+ runtime, e.g. 'apt-get install -y openjdk-17-jre-headless' "
    "(Debian/Ubuntu) or 'brew install openjdk@17' (macOS), then put 'java' on PATH or "
    "set JAVA_HOME"
)

_LOG4J2: Final[str] = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.spark.name = org.apache.spark
logger.spark.level = {level}
"""

#: The JVM's log level (log4j2) chosen with :func:`set_jvm_log_level` (the command line:
#: ``off`` unless ``-v``, its one-line errors naming the cause); None: the session's
#: start picks :func:`~spark_backend.session.quiet_logs.default_jvm_log_level`.
_JVM_LOG_LEVEL: list[str | None] = [None]


#: The level last applied to the running JVM's loggers (None: none yet).
_APPLIED_LEVEL: list[str | None] = [None]


def _jvm_log_level() -> str:
    return _JVM_LOG_LEVEL[0] or default_jvm_log_level()


def _apply_jvm_log_level(session: Any) -> None:
    """Set the running JVM's root and ``org.apache.spark`` loggers to the level wanted
    now (the logging configuration may have changed since the session started); py4j
    calls only when it differs from the level last applied. Classic sessions only."""
    level = _jvm_log_level()
    if level == _APPLIED_LEVEL[0]:
        return
    context = session.sparkContext
    log4j = context._jvm.org.apache.logging.log4j
    # (setLogLevel sets the root logger only; the properties name org.apache.spark too)
    log4j.core.config.Configurator.setLevel("org.apache.spark", log4j.Level.toLevel(level.upper()))
    context.setLogLevel(level.upper())
    _APPLIED_LEVEL[0] = level


def set_jvm_log_level(level: str) -> None:
    """The log4j2 level of this process's JVM (``off``, ``fatal``, ``error``, ``warn``,
    ``info``, ``debug``): a JVM started from now on, and a running one at the next
    :func:`get_session`."""
    if level not in ("off", "fatal", "error", "warn", "info", "debug"):
        raise ValueError(f"JVM log level must be off, fatal, error, warn, info or debug: {level!r}")
    _JVM_LOG_LEVEL[0] = level


_LOCK = threading.Lock()
_SESSION: Any = None  # the shared SparkSession
_MASTER: str | None = None  # the master it was built with


class JavaNotFoundError(RuntimeError):
    """No usable Java runtime (Spark needs Java 17 or newer)."""


def find_java(minimum: int = JAVA_MIN_VERSION) -> str:
    """The Java executable Spark will run (``JAVA_HOME``, else PATH), found without
    running it; :class:`JavaNotFoundError`, naming what to install, when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and not os.access(Path(home) / "bin" / "java", os.X_OK):
        raise JavaNotFoundError(
            f"JAVA_HOME={home!r} has no executable bin/java, and Spark runs that one: "
            f"unset JAVA_HOME or point it at a Java {minimum}+ runtime. {_INSTALL_HINT}."
        )
    java = jvm_start.java_executable()
    if java is None:
        raise JavaNotFoundError(
            f"Spark needs Java {minimum}+ and no 'java' was found (JAVA_HOME unset or "
            f"invalid, nothing on PATH). {_INSTALL_HINT}."
        )
    return str(java)


def check_java(minimum: int = JAVA_MIN_VERSION) -> int:
    """The major version of the Java runtime Spark will use (``JAVA_HOME``, else PATH).

    Raises :class:`JavaNotFoundError`, naming what to install, when there is no Java or
    it is older than ``minimum``.
    """
    java = find_java(minimum)
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise JavaNotFoundError(
            f"could not run {java!r} -version: {err}. {_INSTALL_HINT}."
        ) from None
    text = out.stderr + out.stdout
    m = re.search(r'version "([^"]+)"', text)
    if m is None:
        raise JavaNotFoundError(
            f"could not read the Java version from {java!r} -version "
            f"(got {text.strip()[:200]!r}). {_INSTALL_HINT}."
        )
    parts = m.group(1).split(".")
    major = (
        int(parts[1])
        if parts[0] == "1" and len(parts) > 1
        else int(re.sub(r"\D.*", "", parts[0]) or 0)
    )
    if major < minimum:
        raise JavaNotFoundError(
            f"Spark needs Java {minimum}+, found Java {m.group(1)} at {java!r}. {_INSTALL_HINT}."
        )
    return major


def parse_conf(items: Sequence[str] | Mapping[str, Any] | None) -> dict[str, str]:
    """``--conf`` values (``"key=value"`` strings, or a mapping) as a dict of strings."""
    if items is None:
        return {}
    if isinstance(items, Mapping):
        return {str(k): str(v) for k, v in items.items()}
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"bad --conf {item!r}: expected key=value")
        out[key.strip()] = value
    return out


def _total_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-")


def default_conf(master: str) -> dict[str, str]:
    """The settings :func:`get_session` applies before ``conf`` overrides them."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        # Parquet ns timestamps (pyarrow's default unit) as longs, floored to µs by the
        # trace reader; without it Spark refuses them ([PARQUET_TYPE_ILLEGAL])
        "spark.sql.legacy.parquet.nanosAsLong": "true",
        # Python workers fork from a daemon that has Beam imported already
        "spark.python.daemon.module": "spark_backend.runner.stages.worker_daemon",
    }
    if _is_local(master):
        cores = os.cpu_count() or 2
        conf["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
        conf["spark.default.parallelism"] = str(max(2, 2 * cores))
        total = _total_memory_bytes()
        if total:
            gib = max(1, min(16, total // (2 * 1024**3)))
            conf["spark.driver.memory"] = f"{gib}g"
    return conf


def _log4j_options(run: Path) -> str:
    """The Java option naming the log4j2 properties, written (``O_EXCL | O_NOFOLLOW``,
    mode 0600) into this process's private run directory ``run``."""
    level = _jvm_log_level()
    path = run / f"log4j2-{level}.properties"
    if not path.is_file():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_LOG4J2.replace("{level}", level))
    return f"-Dlog4j2.configurationFile=file:{path}"


#: Local mode's default master: every core, a failed task tried up to 4 times as a
#: cluster does (Spark's ``spark.task.maxFailures`` default; plain ``local[N]`` never
#: retries). ``WATERMARKS_LOCAL_TASK_ATTEMPTS`` sets the attempts (the test suite: 1).
LOCAL_TASK_ATTEMPTS: Final[int] = 4


def default_master() -> str:
    """``local[*,A]``: A is ``WATERMARKS_LOCAL_TASK_ATTEMPTS`` or
    :data:`LOCAL_TASK_ATTEMPTS`."""
    text = os.environ.get("WATERMARKS_LOCAL_TASK_ATTEMPTS", "").strip()
    if not text:
        return f"local[*,{LOCAL_TASK_ATTEMPTS}]"
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"WATERMARKS_LOCAL_TASK_ATTEMPTS must be an integer >= 1, got {text!r}")
    return f"local[*,{int(text)}]"


def private_settings(master: str, settings: Mapping[str, str]) -> dict[str, str]:
    """The settings that keep a run's files in its private run directory
    (:func:`theory.data.private.run_dir`) and a local driver on loopback: the driver
    JVM's ``java.io.tmpdir`` and ``-XX:-UsePerfData`` (no ``hsperfdata_<user>``), the
    log4j2 properties; in local mode also ``spark.local.dir`` and
    ``spark.driver.bindAddress`` / ``spark.driver.host`` 127.0.0.1, unless ``settings``
    set them."""
    run = run_dir()
    out = dict(settings)
    log = _log4j_options(run)
    driver = f"-Djava.io.tmpdir={run} -XX:-UsePerfData {log}"
    options = {"spark.driver.extraJavaOptions": driver, "spark.executor.extraJavaOptions": log}
    if _is_local(master):  # on a cluster the executors' hosts keep their own directories
        out.setdefault("spark.local.dir", str(run))
        out.setdefault("spark.driver.bindAddress", "127.0.0.1")
        out.setdefault("spark.driver.host", "127.0.0.1")
    for key, value in options.items():
        out[key] = (out.get(key, "") + " " + value).strip()
    return out


def get_session(
    master: str | None = None,
    conf: Sequence[str] | Mapping[str, Any] | None = None,
    app_name: str = "watermarks",
) -> Any:
    """The process-wide SparkSession, built on first use (see the module docstring).

    ``master`` is a Spark master URL (``local[*]`` by default; ``sc://host`` for Spark
    Connect, as is a set ``SPARK_REMOTE``); ``conf`` holds ``key=value`` overrides.
    Later calls return the same session; asking for a different ``master`` while it runs
    raises ValueError (call :func:`stop_session` first). Runtime ``spark.sql.*`` settings in
    ``conf`` are applied to the running session.
    """
    global _SESSION, _MASTER
    overrides = parse_conf(conf)
    remote = os.environ.get("SPARK_REMOTE")
    if master is not None and master.startswith("sc://"):
        remote = master
    with _LOCK:
        if _SESSION is not None and not _is_stopped(_SESSION):
            if master is not None and _MASTER is not None and master != _MASTER:
                raise ValueError(
                    f"a Spark session with master {_MASTER!r} already runs in this process; "
                    f"call stop_session() before asking for {master!r}"
                )
            for key, value in overrides.items():
                if key.startswith("spark.sql."):
                    _SESSION.conf.set(key, value)
            if _APPLIED_LEVEL[0] is not None:  # (a classic session; Connect has no JVM here)
                _apply_jvm_log_level(_SESSION)
            return _SESSION
        from pyspark.sql import SparkSession

        if remote:
            builder = SparkSession.builder.remote(remote).appName(app_name)
            settings = {
                k: v for k, v in default_conf("remote").items() if k.startswith("spark.sql.")
            }
            settings.update(overrides)
            session = builder.getOrCreate()
            for key, value in settings.items():
                if key.startswith("spark.sql."):
                    session.conf.set(key, value)
            _SESSION, _MASTER = session, remote
            return session

        check_java()
        chosen = master or overrides.pop("spark.master", None) or default_master()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if _is_local(chosen):
            os.environ["PYSPARK_PYTHON"] = sys.executable
            os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings = default_conf(chosen)
        settings.update(overrides)
        pending = None
        if "spark.driver.extraJavaOptions" not in settings:
            options, pending = jvm_start.driver_java_options(
                str(jvm_start.java_executable()), jvm_start.spark_home()
            )
            settings["spark.driver.extraJavaOptions"] = options
        settings = private_settings(chosen, settings)
        from pyspark import SparkConf, SparkContext

        spark_conf = SparkConf().setMaster(chosen).setAppName(app_name)
        spark_conf.setAll(list(settings.items()))
        with _own_sigint():  # PySpark's handler replaced as soon as the context exists
            SparkContext.getOrCreate(spark_conf)
        builder = SparkSession.builder.master(chosen).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        with _own_sigint():
            session = builder.getOrCreate()
        _APPLIED_LEVEL[0] = None
        _apply_jvm_log_level(session)
        quiet_py4j()
        atexit.register(_stop_jvm, session.sparkContext._gateway)
        if pending is not None:
            _publish_at_exit(session, pending)
        _SESSION, _MASTER = session, chosen
        return session


@contextlib.contextmanager
def _own_sigint() -> Iterator[None]:
    """Keep this process's SIGINT handler across the SparkContext's start. PySpark's own
    calls the JVM from inside the handler (to cancel jobs): on the connection a call in
    progress holds, which can leave that call waiting forever. Without it, Ctrl-C raises
    KeyboardInterrupt as anywhere else, and stopping the session ends the jobs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)


def _publish_at_exit(session: Any, pending: Path) -> None:
    """At this process's exit, let the driver JVM write its class-data archive and
    publish it (:func:`spark_backend.session.jvm_start.publish_archive`)."""
    process = getattr(session.sparkContext._gateway, "proc", None)
    if process is not None:
        atexit.register(_stop_and_publish, process, pending)


def _stop_and_publish(process: Any, pending: Path) -> None:
    with contextlib.suppress(Exception):  # the context's threads end before the JVM
        stop_session()
    jvm_start.publish_archive(process, pending)


def _stop_jvm(gateway: Any) -> None:
    """At exit: stop the session and let its JVM exit (so its files in the run directory
    are closed before the directory is removed)."""
    with contextlib.suppress(Exception):
        stop_session()
    process = getattr(gateway, "proc", None)
    if process is None:
        return
    with contextlib.suppress(Exception):
        if process.stdin is not None:
            process.stdin.close()  # the gateway exits on end of input
        process.wait(timeout=30)


def _is_stopped(session: Any) -> bool:
    try:
        jsc = session.sparkContext._jsc  # classic sessions only
    except Exception:  # Spark Connect has no SparkContext
        return False
    return bool(jsc is None or jsc.sc().isStopped())


def stop_session() -> None:
    """Stop the shared session (if any); the next :func:`get_session` builds a new one."""
    global _SESSION, _MASTER
    with _LOCK:
        if _SESSION is not None:
            _SESSION.stop()
        _SESSION, _MASTER = None, None
        _APPLIED_LEVEL[0] = None


def warm_session() -> None:
    """Start the process's session and run a Spark job and a SQL query in it, so that
    its JVM loads the classes a pipeline needs (``python -m spark_backend.session``:
    when the archive is missing, this process's JVM writes it at exit)."""
    spark = get_session()
    spark.sparkContext.parallelize(range(4), 2).map(str).count()
    spark.range(4).selectExpr("sum(id)").collect()
