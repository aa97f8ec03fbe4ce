"""transfer_platform: per-tenant data transfers on Dagster and PySpark."""
