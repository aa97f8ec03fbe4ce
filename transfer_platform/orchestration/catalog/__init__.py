"""The transfer assets and what they show: one asset per destination and model (``assets``), their
keys and partitions, their ``last_transfer`` and ``integrity`` checks, the resources and the IO
manager, and a transfer told to Dagster as events (``reporting``)."""
