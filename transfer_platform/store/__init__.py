"""The control plane's store: recipients, destinations, sources and models created through the
REST API, API keys, magic links, webhook subscriptions and deliveries, events and the audit log,
in PostgreSQL (the ``store:`` section of the configuration file), migrated with Alembic.

The configuration file still works alone; with a store, the platform's configuration is the file's
entries plus the store's (:func:`transfer_platform.store.resources.merge_stored`).
"""
