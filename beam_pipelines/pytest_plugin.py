"""pytest plugin (entry point ``pytest11``) for Beam authors: fixtures ``pubsub_emulator``
and ``test_stream``.

- ``pubsub_emulator`` (session): the Pub/Sub emulator on a free loopback port, with
  ``PUBSUB_EMULATOR_HOST`` pointing at it for the session (restored after), stopped at
  the end. It is a :class:`beam_pipelines.emulator.Emulator`: ``create_topic()``,
  ``create_subscription(topic)``, ``publish(topic, [{"ts": "..."}, (b"data", {...})])``,
  ``pull(subscription)``, ``host``, ``project``. A missing emulator or Java *fails* the
  test with what to install; it never skips.
- ``test_stream``: a :class:`beam_pipelines.testing.TestStreamBuilder`, which builds Beam
  ``TestStream``s from theory scripts, from traces with a source watermark (optionally
  several tagged inputs), or event by event with durations as ``"10s"``.

The assertions are in :mod:`beam_pipelines.testing`. Installing the package registers
this plugin; Beam is imported only by a test that uses ``test_stream`` or an assertion
that runs a pipeline, so unrelated tests do not pay for ``import apache_beam``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from beam_pipelines.emulator import Emulator, EmulatorError, emulator_host_env


def start_emulator(log_path: Any) -> Emulator:
    """A started :class:`Emulator` logging to ``log_path``; a missing or failing emulator
    fails the test (``pytest.fail``, no traceback) with the reason and what to install."""
    try:
        emulator = Emulator(log_path)
        emulator.start()
    except EmulatorError as e:
        pytest.fail(str(e), pytrace=False)
    return emulator


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """The session's Pub/Sub emulator, with ``PUBSUB_EMULATOR_HOST`` pointing at it."""
    emulator = start_emulator(tmp_path_factory.mktemp("pubsub-emulator") / "emulator.log")
    try:
        with emulator_host_env(emulator.host):
            yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def test_stream() -> Any:
    """A :class:`beam_pipelines.testing.TestStreamBuilder` (imports Beam)."""
    from beam_pipelines.testing.builder import TestStreamBuilder

    return TestStreamBuilder()
