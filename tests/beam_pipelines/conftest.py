"""Fixtures for the tests against the real Pub/Sub emulator (all named ``pubsub_*``).

- ``pubsub_emulator`` (session): the emulator on a free loopback port, with
  ``PUBSUB_EMULATOR_HOST`` set for the session (and restored after), stopped at the end
  by killing its process group.
- ``pubsub_env`` (function): clients plus a fresh topic with a base and a tracking
  subscription, deleted after the test.
- ``pubsub_private_emulator`` / ``pubsub_private_env``: the same on an emulator of the
  test's own, for tests that restart it.

A missing emulator fails the tests that need it (it never skips them): the Debian package
``google-cloud-cli-pubsub-emulator`` is installed by ``scripts/system_deps.sh``, which
``make test`` runs. ``PUBSUB_EMULATOR_LAUNCHER`` may name another launcher script.
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

PROJECT = "dataflow-watermarks-test"
HOST = "127.0.0.1"
DEB_LAUNCHER = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
_INSTALL_HINT = (
    "the Google Cloud Pub/Sub emulator is needed: run `bash scripts/system_deps.sh` (it "
    "installs the Debian package google-cloud-cli-pubsub-emulator; `make test` runs it)"
)
_names = itertools.count()


def _launcher() -> list[str]:
    override = os.environ.get("PUBSUB_EMULATOR_LAUNCHER")
    if override:
        if not os.access(override, os.X_OK):
            pytest.fail(
                f"PUBSUB_EMULATOR_LAUNCHER={override} is not an executable; {_INSTALL_HINT}",
                pytrace=False,
            )
        return [override]
    found = shutil.which("cloud-pubsub-emulator")
    if found:
        return [found]
    if os.access(DEB_LAUNCHER, os.X_OK):
        return [DEB_LAUNCHER]
    pytest.fail(
        f"no cloud-pubsub-emulator launcher (looked on PATH and at {DEB_LAUNCHER}): "
        f"{_INSTALL_HINT}",
        pytrace=False,
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class Emulator:
    """One emulator process (its own process group) on ``HOST:port``."""

    def __init__(self, log_path: Path, port: int | None = None) -> None:
        self.command = _launcher()
        if shutil.which("java") is None:
            pytest.fail(f"java is not on PATH; {_INSTALL_HINT}", pytrace=False)
        self.port = port if port is not None else _free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        #: Seconds each start took to answer (the emulator's startup time).
        self.startup_seconds: list[float] = []

    @property
    def host(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> None:
        assert self.proc is None, "already running"
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
                pytest.fail(
                    f"the Pub/Sub emulator exited at start-up:\n{self._log_tail()}", pytrace=False
                )
            with contextlib.suppress(OSError):
                url = f"http://{self.host}/"
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.read().strip() == b"Ok":
                        self.startup_seconds.append(time.monotonic() - t0)
                        return
            time.sleep(0.05)
        self.stop()
        pytest.fail(
            f"the Pub/Sub emulator was not ready after {READY_TIMEOUT_S:.0f} s:\n"
            f"{self._log_tail()}",
            pytrace=False,
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the process group; SIGKILL it if it is still there after a while."""
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

    def _log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def _emulator_host_env(host: str) -> Iterator[None]:
    old = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = old


@dataclass
class PubsubEnv:
    """Clients bound to one emulator, a topic, and its base and tracking subscriptions."""

    emulator: Emulator
    name: str
    base_ack_deadline: int = 10
    tracking_ack_deadline: int = 10
    publisher: Any = field(init=False)
    subscriber: Any = field(init=False)

    def __post_init__(self) -> None:
        from google.cloud import pubsub_v1

        with _emulator_host_env(self.emulator.host):
            self.publisher = pubsub_v1.PublisherClient()
            self.subscriber = pubsub_v1.SubscriberClient()
        self.topic = self.publisher.topic_path(PROJECT, f"topic-{self.name}")
        self.base = self.subscriber.subscription_path(PROJECT, f"base-{self.name}")
        self.tracking = self.subscriber.subscription_path(PROJECT, f"tracking-{self.name}")

    def create(self) -> None:
        """Create the topic and both subscriptions (again, after an emulator restart)."""
        self.publisher.create_topic(name=self.topic, timeout=10)
        for path, deadline in (
            (self.base, self.base_ack_deadline),
            (self.tracking, self.tracking_ack_deadline),
        ):
            self.subscriber.create_subscription(
                request={"name": path, "topic": self.topic, "ack_deadline_seconds": deadline},
                timeout=10,
            )

    def delete(self) -> None:
        from google.api_core import exceptions as gexc

        for call, arg in (
            (self.subscriber.delete_subscription, {"subscription": self.base}),
            (self.subscriber.delete_subscription, {"subscription": self.tracking}),
            (self.publisher.delete_topic, {"topic": self.topic}),
        ):
            with contextlib.suppress(gexc.GoogleAPIError):
                call(request=arg, timeout=5, retry=None)

    def publish(self, attributes: Sequence[Mapping[str, str]], data: bytes = b"") -> list[str]:
        """Publish one message per attribute map; returns the message ids."""
        futures = [self.publisher.publish(self.topic, data, **dict(a)) for a in attributes]
        return [f.result(timeout=10) for f in futures]

    def close(self) -> None:
        self.subscriber.close()
        self.publisher.stop()


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """The session's emulator, with ``PUBSUB_EMULATOR_HOST`` pointing at it."""
    emu = Emulator(tmp_path_factory.mktemp("pubsub-emulator") / "emulator.log")
    emu.start()
    try:
        with _emulator_host_env(emu.host):
            yield emu
    finally:
        emu.stop()


@pytest.fixture
def pubsub_env(pubsub_emulator: Emulator) -> Iterator[PubsubEnv]:
    """A fresh topic with base and tracking subscriptions (ack deadlines 10 s)."""
    env = PubsubEnv(pubsub_emulator, f"t{next(_names)}")
    env.create()
    try:
        yield env
    finally:
        env.delete()
        env.close()


@pytest.fixture
def pubsub_private_emulator(tmp_path: Path) -> Iterator[Emulator]:
    """An emulator for this test alone (it may restart it); ``PUBSUB_EMULATOR_HOST``
    points at it during the test."""
    emu = Emulator(tmp_path / "emulator.log")
    emu.start()
    try:
        with _emulator_host_env(emu.host):
            yield emu
    finally:
        emu.stop(signal.SIGKILL)


@pytest.fixture
def pubsub_private_env(pubsub_private_emulator: Emulator) -> Iterator[PubsubEnv]:
    """:func:`pubsub_env` on the test's own emulator."""
    env = PubsubEnv(pubsub_private_emulator, f"p{next(_names)}")
    env.create()
    try:
        yield env
    finally:
        env.close()
