"""The stage graph, stages, the simulator, its metrics and diagnosis, and the chapter-3 pipeline.

==========================  ===========================================================
``graph``                   the stage graph and its watermarks (input = min of upstream
                            outputs, output = min(input, holds)), named holds, ``why``
``stages``                  stage specifications: ``Pipeline``, ``Source``, ``ParDo``,
                            ``GroupByWindow``, ``Flatten``
``processing``              processing-delay models (``Processing``)
``simulator``               the deterministic simulator (``simulate``) and its result
``metrics``                 watermark lag, stage lag, late data, window latency
                            (``stage_metrics``)
``diagnosis``               processing-time watermarks, lag series, stall diagnosis
                            (``diagnose``)
``chapter3``                the *Streaming Systems* chapter-3 example pipeline
==========================  ===========================================================
"""
