"""The REST API's fixtures (``support/api.py``)."""

from transfer_platform_tests.support.api import api, platform_api, secret_key, store_schema

__all__ = ["api", "platform_api", "secret_key", "store_schema"]
