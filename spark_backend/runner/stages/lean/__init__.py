"""The lean path: a fused stage made only of known transforms, without Beam's bundle processor.

==================  =============================================================
``program``         a lean stage's program of operations and its run over a
                    partition (``lean_program``, ``run_lean_partition``)
``batch``           the unit of data: a columnar batch of windowed elements
``pardo``           a plain DoFn called in a tight loop over a batch's values
``windows``         WindowInto: windows assigned on the timestamp column
``combine``         a lifted combine's partial combine (numpy for built-in
                    CombineFns on int values)
``count``           ``Count.PerElement``: its PairWithVoid fused into the count
``sdf``             an unbounded splittable DoFn with Beam's own restriction
                    tracker and watermark estimator
``encode``          a batch written in Beam's coder bytes, without a Beam object
                    per element
==================  =============================================================
"""
