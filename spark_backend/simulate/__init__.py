"""``simulate --engine spark``: a pipeline simulated stage by stage on key partitions.

==================  =============================================================
``simulation``      the driver: ``simulate_keyed``, stage by stage, holding only
                    watermark and hold series
``sources``         a source made on the executors, block by block
``parts``           one key partition's steps (the executor side)
``grid``            a key partition's own event grid for a grouping stage
``compare``         whether the result equals the local simulator's
==================  =============================================================
"""
