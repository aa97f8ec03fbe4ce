"""Delta Sharing: a ``delta`` destination with ``sharing: {enabled: true}`` is served to its
recipient over the open Delta Sharing REST protocol (delta-io/delta-sharing, PROTOCOL.md) under the
API's ``/delta-sharing`` prefix, each file of a query's answer a pre-signed, expiring URL.

- :mod:`.tokens`: one bearer token per recipient, stored as its SHA-256, expiring, rotated and
  revoked; the profile file a recipient's client reads.
- :mod:`.tables`: the recipient's shares (its shared destinations), their tables (the models), a
  table's snapshot read from its Delta log (a committed version only) and its files' URLs.
- the routes are the API's (:mod:`transfer_platform.api.sharing`): the protocol's routes, the
  signed file route of a folder's files, the provider's token routes and the magic link's profile
  page.
"""
