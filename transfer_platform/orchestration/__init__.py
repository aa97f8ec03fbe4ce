"""The Dagster side: assets built from the configuration, resources, the IO manager.

Importing it changes nothing of Dagster: the fixes of ``dagster_fixes`` are installed by what needs
them (the definitions, the partitions, the run coordinator), and Dagster's private names are
reached through ``dagster_internals`` only.
"""
