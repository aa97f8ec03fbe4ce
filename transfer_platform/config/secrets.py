"""Secrets are never written in the configuration file: it holds references to environment variables.

``password: ${PG_PASSWORD}`` or ``password: {env: PG_PASSWORD}``. The value is read when a
connection is opened, held as ``pydantic.SecretStr`` (its ``repr`` is ``'**********'``) and never
placed in logs, run config or asset metadata.

Libraries log what they carry, though: py4j writes every command it sends to the JVM at DEBUG,
among them the JDBC options and, base64-encoded, the pickled function the PostgreSQL COPY ships to
Spark's Python workers. So every value read here is remembered, and from the first one on every
log record of the process is redacted when it is made (the log record factory; py4j's loggers
also carry :class:`SecretsFilter`, should the factory be replaced): the value plain, URL-encoded,
JSON/repr-escaped, as protobuf's text format escapes it (Spark Connect's plans) and base64-encoded (at any of the three alignments inside a longer base64 text,
standard or URL-safe) becomes ``***``, whatever level a logger is set to.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
from typing import Any
from urllib.parse import quote, quote_plus

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationInfo, model_validator

from transfer_platform.errors import ConfigError, Problem

_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


class EnvRef(BaseModel):
    """A secret: a reference to an environment variable holding it (the configuration file's
    form), or its value encrypted with the platform's key (``{encrypted: ...}``: what the REST API
    stores for a secret a client sends; see :func:`encrypt_secret`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: str | None = None
    encrypted: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            match = _REF.match(value.strip())
            if match:
                return {"env": match.group(1)}
            if info.context and info.context.get(PLAIN_SECRETS):
                # a value sent to the REST API: encrypted at once, never kept plain
                return {"encrypted": encrypt_secret(value)}
            raise ValueError(
                "secrets cannot be written in the configuration file; put the value in an "
                "environment variable and write '${VARIABLE_NAME}' (or {env: VARIABLE_NAME})"
            )
        return value

    @model_validator(mode="after")
    def _one_form(self) -> EnvRef:
        if (self.env is None) == (self.encrypted is None):
            raise ValueError("a secret is either {env: VARIABLE_NAME} or {encrypted: ...}, not both or neither")
        return self

    def resolve(self, where: str) -> SecretStr:
        if self.encrypted is not None:
            value = decrypt_secret(self.encrypted, where)
        else:  # then ``env`` is set (:meth:`_one_form`)
            value = os.environ.get(self.env) if self.env is not None else None
            if value is None:
                raise ConfigError(
                    [Problem(where, f"environment variable {self.env} is not set",
                             f"export {self.env}=... in the environment of the process (and of "
                             "dagster dev / the daemon)")]
                )
        remember_secret(value)
        return SecretStr(value)

    def __str__(self) -> str:
        return "(stored encrypted)" if self.encrypted is not None else f"${{{self.env}}}"


# -- secrets stored encrypted (the REST API's) ------------------------------------------------------

#: the validation context key under which a plain string is accepted as a secret and encrypted
PLAIN_SECRETS = "plain_secrets"
#: the environment variable holding the key(s) secrets are stored with: Fernet keys, comma-separated,
#: the first encrypts, every one decrypts (rotation: put the new key first, keep the old after it)
SECRET_KEY_ENV = "TRANSFER_PLATFORM_SECRET_KEY"
_KEY_FIX = (f"export {SECRET_KEY_ENV}=<key> in the environment of the API, the Dagster daemon and the "
            "code server (a new key: `transfer-platform store new-key`)")


def _fernet():  # -> cryptography.fernet.MultiFernet
    from cryptography.fernet import Fernet, MultiFernet

    text = os.environ.get(SECRET_KEY_ENV, "").strip()
    if not text:
        raise ConfigError([Problem(SECRET_KEY_ENV, "not set: secrets stored through the API cannot be "
                                   "encrypted or read", _KEY_FIX)])
    try:
        return MultiFernet([Fernet(key.strip()) for key in text.split(",") if key.strip()])
    except ValueError:
        raise ConfigError([Problem(SECRET_KEY_ENV, "is not a valid key (32 url-safe base64-encoded bytes "
                                   "each, comma-separated)", _KEY_FIX)]) from None


def new_secret_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def encrypt_secret(value: str) -> str:
    remember_secret(value)
    return _fernet().encrypt(value.encode()).decode()


def decrypt_secret(token: str, where: str) -> str:
    from cryptography.fernet import InvalidToken

    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ConfigError([Problem(where, f"the stored secret cannot be decrypted with {SECRET_KEY_ENV}",
                                   "set the key it was stored with (keys are comma-separated: the "
                                   "first encrypts, all decrypt), or send the secret again")]) from None


def mask_secrets(value: Any) -> Any:
    """``value`` (a configuration entry as JSON) with every stored secret replaced by ``***``:
    what the API returns and the audit log keeps."""
    if isinstance(value, dict):
        if set(value) == {"encrypted"}:
            return REDACTED
        return {key: mask_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_secrets(item) for item in value]
    return value


# -- redaction of logs ------------------------------------------------------------------------------

REDACTED = "***"
#: loggers known to carry resolved passwords (py4j's command log), filtered even if the record
#: factory is replaced
CARRIER_LOGGERS = ("py4j", "py4j.java_gateway", "py4j.clientserver")
#: shorter forms (a base64 fragment of a very short password) are not redacted: they would match
#: ordinary text, and a password that short is no secret anyway
_MIN_FORM = 4

_lock = threading.Lock()
_secrets: set[str] = set()
_forms: tuple[str, ...] = ()  # longest first
_installed = False


def secret_forms(value: str) -> set[str]:
    """How ``value`` can be written: plain, URL-encoded, JSON/repr-escaped, and base64 at each
    alignment inside a longer base64 text (only the characters that depend on ``value`` alone)."""
    raw = value.encode()
    forms = {value, quote(value, safe=""), quote(value), quote_plus(value), json.dumps(value)[1:-1],
             repr(value)[1:-1]}
    forms |= _protobuf_text_forms(value)
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for shift in range(3):
            encoded = encode(b"\0" * shift + raw).decode()
            forms.add(encoded[4 if shift else 0:4 * ((shift + len(raw)) // 3)])
    return {form for form in forms if len(form) >= _MIN_FORM}


def _protobuf_text_forms(value: str) -> set[str]:
    """``value`` as protobuf's text format writes a string field (a Spark Connect client logs
    its plans, the JDBC options among them, so at DEBUG)."""
    try:
        from google.protobuf import text_encoding
    except ImportError:  # no Spark Connect client here
        return set()
    # (as_utf8: text, which protobuf's annotation, bytes only, leaves out)
    return {text_encoding.CEscape(value.encode(), False),
            text_encoding.CEscape(value, True)}  # pyright: ignore[reportArgumentType]


def remember_secret(value: str) -> None:
    """Redact ``value`` (in all its forms) from every log record made in this process from now on."""
    global _forms
    if not value or value in _secrets:
        return
    with _lock:
        _secrets.add(value)
        forms = set(_forms) | secret_forms(value)
        _forms = tuple(sorted(forms, key=len, reverse=True))
        install_log_redaction()


def redact_secrets(text: str) -> str:
    """``text`` with every remembered secret, in any of its forms, replaced by ``***``."""
    for form in _forms:
        if form in text:
            text = text.replace(form, REDACTED)
    return text


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Redact a log record in place: its message (formatted with its arguments), traceback and
    stack."""
    if not _forms:
        return record
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a broken record is the handler's to report, as logging does
        return record
    clean = redact_secrets(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact_secrets(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_secrets(record.stack_info)
    return record


class SecretsFilter(logging.Filter):
    """Redacts the remembered secrets from every record passing through (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


def install_log_redaction() -> None:
    """Redact remembered secrets from every log record this process makes (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    make_record = logging.getLogRecordFactory()

    def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(make_record(*args, **kwargs))

    logging.setLogRecordFactory(redacting_factory)
    for name in CARRIER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, SecretsFilter) for f in logger.filters):
            logger.addFilter(SecretsFilter())


# -- references whose variable is not set ---------------------------------------------------------


def env_refs(value: Any, path: str) -> list[tuple[str, EnvRef]]:
    """Every secret reference inside ``value`` (a configuration entry, walked through its fields,
    lists and mappings), with its path in the file (``destinations[0] (acme).connection.password``)."""
    if isinstance(value, EnvRef):
        return [(path, value)]
    found: list[tuple[str, EnvRef]] = []
    if isinstance(value, BaseModel):
        for name, info in type(value).model_fields.items():
            found += env_refs(getattr(value, name), f"{path}.{info.alias or name}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found += env_refs(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += env_refs(item, f"{path}.{key}")
    return found


def unset_secrets(entries: list[tuple[str, Any]]) -> list[Problem]:
    """One problem per secret reference, in ``entries`` (path, configuration entry), whose
    environment variable is not set in this process (an empty value counts as set)."""
    problems = [Problem(path, f"environment variable {ref.env} is not set",
                        f"export {ref.env}=... in the environment of this command (and of the Dagster "
                        "daemon and code server that run transfers)")
                for entry_path, entry in entries for path, ref in env_refs(entry, entry_path)
                if ref.env is not None and os.environ.get(ref.env) is None]
    stored = [path for entry_path, entry in entries for path, ref in env_refs(entry, entry_path)
              if ref.encrypted is not None]
    if stored and not os.environ.get(SECRET_KEY_ENV, "").strip():
        problems.append(Problem(stored[0], f"is stored encrypted, and {SECRET_KEY_ENV} is not set", _KEY_FIX))
    return problems
