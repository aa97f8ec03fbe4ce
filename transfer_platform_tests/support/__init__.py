"""What the tests share, by job (no test module imports another; pytest fixtures stay in the
conftest.py files): postgres, mysql, events (rows and source tables), config, transfers, lake,
destinations (the vendor registry's destinations, one test destination of each and a reader of
what it holds), spark, s3_server, spark_server, platform, dagster, daemon, cli, files, and the
scenarios shared by several test modules (sparse_tenant, daily_windows)."""
