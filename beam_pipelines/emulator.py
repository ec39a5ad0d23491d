"""The Google Cloud Pub/Sub emulator as a local process, for tests.

:class:`Emulator` starts the emulator on a loopback port (a free one by default) in its
own process group, waits until it answers, and stops it (SIGTERM, then SIGKILL). It
offers what a test needs: topics, subscriptions, publishing with attributes, pulling.
:func:`emulator_host_env` points ``PUBSUB_EMULATOR_HOST`` (which Google's clients and
Beam's Pub/Sub IO read) at it for a while.

The launcher is found, in order, at ``PUBSUB_EMULATOR_LAUNCHER``, on ``PATH``
(``cloud-pubsub-emulator``), in the Debian package's place, and next to a ``gcloud`` on
``PATH`` (``gcloud components install pubsub-emulator``). Where none is there, or Java is
missing, :class:`EmulatorMissing` says what to install. This module imports neither
Beam nor, until a client is needed, google-cloud-pubsub.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_PROJECT",
    "INSTALL_HINT",
    "Emulator",
    "EmulatorError",
    "EmulatorMissing",
    "emulator_host_env",
    "find_launcher",
    "free_port",
]

HOST = "127.0.0.1"
DEFAULT_PROJECT = "dataflow-watermarks-test"
DEB_LAUNCHER = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"
_SDK_LAUNCHER = Path("platform", "pubsub-emulator", "bin", "cloud-pubsub-emulator")
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
INSTALL_HINT = (
    "the Google Cloud Pub/Sub emulator and Java 17+ are needed: install the Debian/Ubuntu "
    "package google-cloud-cli-pubsub-emulator (Google's apt repository), or run "
    "`gcloud components install pubsub-emulator`, or set PUBSUB_EMULATOR_LAUNCHER to the "
    "emulator's cloud-pubsub-emulator script"
)
_names = itertools.count()


class EmulatorError(RuntimeError):
    """The emulator could not start or answer."""


class EmulatorMissing(EmulatorError):
    """No emulator launcher, or no Java: the message says what to install."""


def find_launcher() -> list[str]:
    """The emulator's launcher command (see the module docstring), or
    :class:`EmulatorMissing`."""
    override = os.environ.get("PUBSUB_EMULATOR_LAUNCHER")
    if override:
        if not os.access(override, os.X_OK):
            raise EmulatorMissing(
                f"PUBSUB_EMULATOR_LAUNCHER={override} is not an executable; {INSTALL_HINT}"
            )
        return [override]
    candidates = [shutil.which("cloud-pubsub-emulator"), DEB_LAUNCHER]
    gcloud = shutil.which("gcloud")
    if gcloud:
        candidates.append(str(Path(os.path.realpath(gcloud)).parents[1] / _SDK_LAUNCHER))
    for found in candidates:
        if found and os.access(found, os.X_OK):
            return [found]
    raise EmulatorMissing(
        f"no cloud-pubsub-emulator launcher (looked at PUBSUB_EMULATOR_LAUNCHER, on PATH, "
        f"at {DEB_LAUNCHER} and next to gcloud): {INSTALL_HINT}"
    )


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def emulator_host_env(host: str) -> Iterator[None]:
    """``PUBSUB_EMULATOR_HOST=host`` inside the block; the old value restored after."""
    old = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = old


class Emulator:
    """One emulator process (its own process group) on ``127.0.0.1:port``, with helpers
    for topics, subscriptions, publishing and pulling in ``project``."""

    def __init__(
        self, log_path: Path | str, port: int | None = None, project: str = DEFAULT_PROJECT
    ) -> None:
        self.command = find_launcher()
        if shutil.which("java") is None:
            raise EmulatorMissing(f"java is not on PATH; {INSTALL_HINT}")
        self.port = port if port is not None else free_port()
        self.log_path = Path(log_path)
        self.project = project
        self.proc: subprocess.Popen[bytes] | None = None
        #: Seconds each start took to answer (the emulator's startup time).
        self.startup_seconds: list[float] = []
        self._publisher: Any = None
        self._subscriber: Any = None

    @property
    def host(self) -> str:
        """``127.0.0.1:port``, the value for ``PUBSUB_EMULATOR_HOST``."""
        return f"{HOST}:{self.port}"

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the process and wait until it answers (:class:`EmulatorError` if it exits
        or does not answer within a minute; the message ends with its log)."""
        if self.proc is not None:
            raise EmulatorError("the emulator is already running")
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.command, f"--host={HOST}", f"--port={self.port}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = t0 + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise EmulatorError(f"the Pub/Sub emulator exited at start-up:\n{self.log_tail()}")
            if self._answers():
                self.startup_seconds.append(time.monotonic() - t0)
                return
            time.sleep(0.05)
        self.stop()
        raise EmulatorError(
            f"the Pub/Sub emulator was not ready after {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}"
        )

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}/", timeout=1) as resp:
                return bool(resp.read().strip() == b"Ok")
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Close the clients, signal the process group, SIGKILL it if it stays."""
        self.close_clients()
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT_S)

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Kill (by default hard) and start again on the same port. The emulator keeps
        nothing: topics, subscriptions and messages are gone afterwards."""
        self.stop(sig)
        self.start()

    def log_tail(self, n: int = 30) -> str:
        """The last ``n`` lines of the emulator's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    # ---------------------------------------------------------------- clients

    @property
    def publisher(self) -> Any:
        """A ``pubsub_v1.PublisherClient`` bound to this emulator."""
        if self._publisher is None:
            from google.cloud import pubsub_v1

            with emulator_host_env(self.host):
                self._publisher = pubsub_v1.PublisherClient()
        return self._publisher

    @property
    def subscriber(self) -> Any:
        """A ``pubsub_v1.SubscriberClient`` bound to this emulator."""
        if self._subscriber is None:
            from google.cloud import pubsub_v1

            with emulator_host_env(self.host):
                self._subscriber = pubsub_v1.SubscriberClient()
        return self._subscriber

    def close_clients(self) -> None:
        """Close the clients (made again on next use)."""
        if self._subscriber is not None:
            self._subscriber.close()
        if self._publisher is not None:
            self._publisher.stop()
        self._publisher = self._subscriber = None

    # ---------------------------------------------------------------- helpers

    def topic_path(self, name: str) -> str:
        """``projects/<project>/topics/<name>``."""
        return f"projects/{self.project}/topics/{name}"

    def subscription_path(self, name: str) -> str:
        """``projects/<project>/subscriptions/<name>``."""
        return f"projects/{self.project}/subscriptions/{name}"

    def create_topic(self, name: str | None = None) -> str:
        """Create a topic (a fresh name by default); its path."""
        path = self.topic_path(name or f"topic-{os.getpid()}-{next(_names)}")
        self.publisher.create_topic(name=path, timeout=10)
        return path

    def create_subscription(
        self, topic: str, name: str | None = None, *, ack_deadline_seconds: int = 10
    ) -> str:
        """Create a subscription to ``topic`` (a path or a name); its path."""
        if "/" not in topic:
            topic = self.topic_path(topic)
        path = self.subscription_path(name or f"sub-{os.getpid()}-{next(_names)}")
        self.subscriber.create_subscription(
            request={"name": path, "topic": topic, "ack_deadline_seconds": ack_deadline_seconds},
            timeout=10,
        )
        return path

    def publish(
        self,
        topic: str,
        messages: Iterable[bytes | str | Mapping[str, str] | tuple[bytes | str, Mapping[str, str]]],
    ) -> list[str]:
        """Publish messages to ``topic`` (a path or a name) and wait for them: each is
        data (bytes or str), an attribute map (empty data), or ``(data, attributes)``.
        Returns the message ids."""
        if "/" not in topic:
            topic = self.topic_path(topic)
        futures = []
        for i, message in enumerate(messages):
            if isinstance(message, tuple):
                data, attributes = message
            elif isinstance(message, Mapping):
                data, attributes = b"", message
            else:
                data, attributes = message, {}
            if isinstance(data, str):
                data = data.encode()
            if not isinstance(data, bytes):
                raise TypeError(f"messages[{i}]: data must be bytes or str, got {data!r}")
            bad = [k for k, v in attributes.items() if not isinstance(v, str)]
            if bad:
                raise TypeError(f"messages[{i}]: attribute {bad[0]!r} must be a str")
            futures.append(self.publisher.publish(topic, data, **dict(attributes)))
        return [f.result(timeout=10) for f in futures]

    def pull(self, subscription: str, max_messages: int = 100, *, ack: bool = True) -> list[Any]:
        """Pull up to ``max_messages`` received messages from ``subscription`` (a path or a
        name) without waiting; acknowledge them unless ``ack=False``."""
        if "/" not in subscription:
            subscription = self.subscription_path(subscription)
        response = self.subscriber.pull(
            request={"subscription": subscription, "max_messages": max_messages},
            timeout=10,
            retry=None,
        )
        received = list(response.received_messages)
        if ack and received:
            self.subscriber.acknowledge(
                request={"subscription": subscription, "ack_ids": [m.ack_id for m in received]}
            )
        return received
