"""A SQL destination is a dialect: :mod:`.writer` (the algorithm, once), :mod:`.dialect` (the
statements a vendor writes), :mod:`.session` (one small adapter per driver), :mod:`.rename_publish`
(a full refresh's publish, and the empty-table load ``create-and-rename``, where DDL commits)."""
