"""Object stores and their locks, below sources and destinations alike: a folder, an S3 bucket, an
Azure container (``stores.py`` chooses one by the connection's type), each with the models' locks
of its kind, and the probe of a folder's rights."""
