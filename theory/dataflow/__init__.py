"""The dataflow semantics profile: the central aggregator and the Pub/Sub estimator."""
