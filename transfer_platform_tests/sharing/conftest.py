"""The REST API's fixtures for the sharing tests (``support/api.py``)."""

from transfer_platform_tests.support.api import secret_key, store_schema

__all__ = ["secret_key", "store_schema"]
