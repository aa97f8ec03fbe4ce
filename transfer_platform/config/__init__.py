"""Configuration: one YAML file of sources, models, recipients and destinations.

``loading.py`` loads it (with the store's entries), ``parsing.py`` reads and validates it,
``models.py`` is its schema (a vendor's classes beside its record: ``transfer_platform/vendors/``),
``cross_checks.py`` its rules across entries.
"""
