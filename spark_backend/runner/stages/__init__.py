"""The stages, task side: a fused stage run over one Spark partition.

==================  =============================================================
``bundles``         a stage as one bundle of Beam's ``SdkWorker`` over in-memory
                    data channels (the generic path)
``lean``            the lean path: a stage of known transforms run without the
                    bundle processor, on columnar batches
``side_inputs``     side-input contents, laid out as the SDK reads them
``task_context``    the pipeline's coders and windowing strategies, per process
``text_source``     ``ReadFromText`` read by byte ranges into lean batches
``worker_daemon``   PySpark's Python worker daemon with Beam already imported
``worker_warnings`` the warnings Beam's SDK worker raises in a task, kept for the
                    driver to warn again
==================  =============================================================
"""
