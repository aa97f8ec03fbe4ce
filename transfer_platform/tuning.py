"""Sizes and waits a transfer works with: passed in (a ``Tuning`` given to the transfer, which
hands it to its reader and writer), never read from module constants, so that a test or a
benchmark sets them for one transfer without patching anything.

The defaults are the product's; they are not configuration-file settings (a provider has never
needed to change them), and the benchmarks document why each has its value.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    #: windows read together in one Spark job hold at most this many rows ...
    run_rows: int = 50_000
    #: ... and at most this many windows
    run_windows: int = 64
    #: rows per Arrow batch a writer stages or reads back (Parquet row groups, Delta batches)
    batch_rows: int = 10_000
    #: rows per commit when a writer removes swept deletes
    delete_batch_rows: int = 100_000
    #: keys an append-only Delta transfer remembers before it falls back to MERGE
    append_keys_max: int = 1_000_000
    #: how long a transfer waits for a model's lock (or a live table's readers) before it is refused
    lock_wait_seconds: float = 10
    #: windows read together from a database whose columns need no conversion are read by its
    #: driver, without a Spark job (sources/direct.py); False: every read goes through Spark
    direct_reads: bool = True
    #: a window moved alone from a PostgreSQL source to a PostgreSQL destination whose columns
    #: need no conversion is relayed in binary COPY format by Spark's tasks (sources/relay.py),
    #: and a small window read directly alone is streamed so by this process; False: it is read
    #: by Spark's JDBC reader (a small one by the driver, into Arrow) and written as CSV
    relay_windows: bool = True


DEFAULT = Tuning()
