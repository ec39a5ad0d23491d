"""A Hypothesis strategy for the driver's TestStream events, shared by the driver tests
that run without Spark (kept out of ``tests/helpers/streaming.py``, which Spark workers
import without Hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from spark_backend.runner.streaming.elements import Elements
from spark_backend.runner.streaming.sources import ELEMENTS, PROCESSING_TIME, WATERMARK

#: One event as the sources hold it: one element, a watermark (µs) or a processing-time
#: advance (µs, > 0).
EVENT = st.one_of(
    st.tuples(st.just(ELEMENTS), st.just(Elements(["x"], np.zeros(1, np.int64)))),
    st.tuples(st.just(WATERMARK), st.integers(0, 10**6)),
    st.tuples(st.just(PROCESSING_TIME), st.integers(1, 10**6)),
)
