"""The Structured Streaming oracle: theory's spark profile checked against real Spark.

==========================  ==================================================
``structured``              micro-batches through real Structured Streaming
``structured_timers``       event-time timers of Spark's state APIs
``structured_trigger``      Spark's ``ProcessingTime`` trigger
==========================  ==================================================
"""
