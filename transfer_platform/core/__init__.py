"""The pure core: window grids, watermark and lookback arithmetic, merge planning.

Nothing in this package imports Dagster, Spark or a database driver; every function takes
plain values (datetimes, integers, strings) and returns plain values, so it is tested with
tables of cases.
"""
