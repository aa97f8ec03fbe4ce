"""Where the platform may connect for a destination: :mod:`transfer_platform.network.addresses`."""
