"""What starts runs and when: the ``transfer_schedule`` sensor (with its time budget and its
repairs), the run coordinator that puts the configuration's limits on every run, the run tags the
limits read, and when a loaded configuration is stale."""
