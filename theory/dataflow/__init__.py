"""The dataflow semantics profile: the central aggregator and the Pub/Sub estimator.

==========================  ===========================================================
``aggregator``              out-of-band watermark aggregation over leased key ranges
                            (``CentralAggregator``)
``pubsub``                  Pub/Sub event-time watermarks: the base/tracking estimator
                            (``TrackingEstimator``) and Beam's rule
``pubsub_simulation``       a deterministic in-memory Pub/Sub and a base/tracking
                            watermark simulation
==========================  ===========================================================
"""
