"""Fixtures for the tests against the real Pub/Sub emulator (all named ``pubsub_*``).

- ``pubsub_emulator`` (session) is the package's pytest plugin fixture
  (:mod:`beam_pipelines.pytest_plugin`): the emulator on a free loopback port, with
  ``PUBSUB_EMULATOR_HOST`` set for the session (and restored after).
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
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from beam_pipelines.emulator import DEFAULT_PROJECT, Emulator, emulator_host_env
from beam_pipelines.pytest_plugin import start_emulator

PROJECT = DEFAULT_PROJECT
_names = itertools.count()


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

        with emulator_host_env(self.emulator.host):
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
    emu = start_emulator(tmp_path / "emulator.log")
    try:
        with emulator_host_env(emu.host):
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
