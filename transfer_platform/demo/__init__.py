"""The embedded demo: a Parquet lake, three recipients, Delta destinations, no server to install or start."""
