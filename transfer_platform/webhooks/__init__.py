"""Webhooks: subscriptions to the platform's events, delivered signed, retried, once per event.

- **Events** are rows of the ``events`` outbox (:mod:`transfer_platform.store.events`), written
  in the same transaction as the change they report (a destination created through the API) or,
  for transfers, by the ``transfer_events`` sensor of the Dagster daemon, one per finished
  transfer run (:mod:`.transfer_events`). The types are :data:`.event_types.EVENT_TYPES`.
- **Subscriptions** (:mod:`.subscriptions`, ``/webhooks`` in the REST API): a URL, the event
  types it receives, a format (``generic`` JSON or ``slack``, an incoming-webhook's
  ``{"text": ...}``), enabled or not, and a signing secret the server makes, shows once, and
  keeps encrypted.
- **Delivery** (:mod:`.delivery`): the ``webhook_delivery`` sensor of the daemon (and
  ``transfer-platform webhooks deliver``) fans new events out to the subscriptions
  that match, POSTs each with a short timeout, and retries with backoff. Never in a transfer's
  process: a receiver that is down cannot slow or fail a transfer.

Verifying a delivery (as Stripe's and Slack's signatures are verified): every POST carries

- ``X-Transfer-Platform-Event-Id``: the event's id, the same on every retry (de-duplicate on it);
- ``X-Transfer-Platform-Event``: its type (``transfer.error``);
- ``X-Transfer-Platform-Timestamp``: Unix seconds when the attempt was signed;
- ``X-Transfer-Platform-Signature``: ``sha256=`` and the hex HMAC-SHA256, keyed with the
  webhook's secret, of the timestamp, a dot and the raw request body (``b"1718000000." + body``).

Recompute it over the raw bytes received (before parsing the JSON), compare in constant time
(``hmac.compare_digest``), and refuse a timestamp more than a few minutes from your clock (a
replayed request). :func:`.signing.verify` does exactly this.
"""
