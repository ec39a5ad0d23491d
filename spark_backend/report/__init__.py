"""The report of ``watermarks demo`` and ``watermarks analyze``, and what it shows.

==================  =============================================================
``report``          ``Report``: an ``index.html`` with figures (PNG) and tables
                    (CSV and HTML), written atomically
``plots``           the report's figures (matplotlib, Agg)
``tables``          output tables with their units
``window_table``    ``windows.parquet``: the per-window results
``systems``         the cross-system section: one trace through the beam, flink and
                    spark profiles
``comparison``      the watermark strategy comparison on Spark
``uncertainty``     the intervals over seeds and the bootstrap intervals over windows
==================  =============================================================
"""
