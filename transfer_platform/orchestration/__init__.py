"""The Dagster side: assets built from the configuration, resources, the IO manager."""

from transfer_platform.orchestration.dagster_fixes import install as _install_dagster_fixes

_install_dagster_fixes()
