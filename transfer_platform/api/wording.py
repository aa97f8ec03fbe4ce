"""A connection check's fix in the words of whoever entered the destination.

The checks (:mod:`transfer_platform.transfers.connection_test`) speak to the provider who wrote a
configuration file, whose secrets are environment variables (``${PG_PASSWORD}``). A secret sent to
the API as a value (``POST /test-destination``, a destination saved with its password) or typed into
the recipient's form was entered, not referenced: its fix speaks of the secret as entered.
"""

from __future__ import annotations

import re
from typing import Any

from transfer_platform.config.secrets import env_refs

#: a fix's words for a secret held by an environment variable -> for a secret entered as a value
_ENTERED_WORDS = (
    (r"the (\w+)'s \(or (\w+)'s\) environment variable", r"the \1 (or \2) you entered"),
    (r"the (\w+)'s environment variable", r"the \1 you entered"),
    (r"the environment variable connection\.(\w+) names", r"the \1 you entered"),
    (r"\(connection\.(\w+)'s variable\)", r"(the \1 you entered)"),
    (r"(\w+) variable in the configuration", r"\1 you entered"),
)
#: and for the recipient, who typed a form: its fields, not the configuration's paths
_FORM_WORDS = (
    (r"\bconnection\.(\w+)", r"the \1"),
    (r"\bcheck (username|account)\b", r"check the \1"),
)


def secrets_entered(destination: Any) -> bool:
    """Whether every secret of ``destination`` (a configuration entry) was given as a value (stored
    encrypted), none as an environment variable."""
    refs = env_refs(destination, "destination")
    return bool(refs) and all(ref.encrypted is not None for _, ref in refs)


def as_entered(fix: str) -> str:
    """``fix`` for a destination whose secrets were entered as values."""
    for pattern, words in _ENTERED_WORDS:
        fix = re.sub(pattern, words, fix)
    return fix


def for_form(fix: str) -> str:
    """``fix`` for the recipient who typed the form (its secrets entered, its fields by label)."""
    fix = as_entered(fix)
    for pattern, words in _FORM_WORDS:
        fix = re.sub(pattern, words, fix)
    return fix
