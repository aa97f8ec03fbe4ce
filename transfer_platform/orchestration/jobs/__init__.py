"""The op jobs the definitions hold beside the assets: ``transfer`` (one transfer of one
destination), ``delete_sweep`` and ``test_connection``."""
