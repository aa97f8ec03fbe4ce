"""Secrets are never written in the configuration file: it holds references to environment variables.

``password: ${PG_PASSWORD}`` or ``password: {env: PG_PASSWORD}``. The value is read when a
connection is opened, held as ``pydantic.SecretStr`` (its ``repr`` is ``'**********'``) and never
placed in logs, run config or asset metadata.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

from transfer_platform.errors import ConfigError, Problem

_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


class EnvRef(BaseModel):
    """A reference to an environment variable holding a secret."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: str

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            match = _REF.match(value.strip())
            if not match:
                raise ValueError(
                    "secrets cannot be written in the configuration file; put the value in an "
                    "environment variable and write '${VARIABLE_NAME}' (or {env: VARIABLE_NAME})"
                )
            return {"env": match.group(1)}
        return value

    def resolve(self, where: str) -> SecretStr:
        value = os.environ.get(self.env)
        if value is None:
            raise ConfigError(
                [Problem(where, f"environment variable {self.env} is not set",
                         f"export {self.env}=... in the environment of the process (and of "
                         "dagster dev / the daemon)")]
            )
        return SecretStr(value)

    def __str__(self) -> str:
        return f"${{{self.env}}}"
