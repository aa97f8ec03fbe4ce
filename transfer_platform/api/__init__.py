"""The provider's REST API (FastAPI): Prequel's resources and shapes over the store
(``transfer_platform/store``) and the Dagster instance. ``transfer-platform api`` serves it."""
