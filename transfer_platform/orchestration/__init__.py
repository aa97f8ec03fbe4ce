"""The Dagster side: assets built from the configuration, resources, the IO manager."""
