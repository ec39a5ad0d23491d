"""A Beam author's Pub/Sub test on the emulator (the plugin's pubsub_emulator fixture)."""

import os


def test_publish_with_attributes_and_pull(pubsub_emulator):
    assert os.environ["PUBSUB_EMULATOR_HOST"] == pubsub_emulator.host
    topic = pubsub_emulator.create_topic()
    subscription = pubsub_emulator.create_subscription(topic)
    pubsub_emulator.publish(topic, [(b"score", {"ts": "2024-01-01T00:00:05Z"}), {"ts": "1"}])
    received = []
    while len(received) < 2:
        received += pubsub_emulator.pull(subscription)
    assert sorted(m.message.attributes["ts"] for m in received) == ["1", "2024-01-01T00:00:05Z"]
