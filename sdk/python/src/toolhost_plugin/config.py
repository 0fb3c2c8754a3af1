"""The plugin's configuration: the values and secrets the operator supplied
for the ``[[config]]`` items its manifest declares.

toolhost writes them once per process start to a 0600 file named by
``TOOLHOST_PLUGIN_CONFIG``; :func:`load` reads it once and deletes it, so a
process the plugin starts later finds nothing to read.

Plain values and secrets are apart on purpose: :meth:`Config.get` never
returns a secret, and a :class:`Secret` prints as ``Secret(..)``, so logging
the configuration or a secret by mistake leaks nothing::

    from toolhost_plugin import config

    site = config.get("base_url", "https://jira.example.com")
    token = config.secret("token")          # a Secret, or None
    headers = {"Authorization": f"Bearer {token.expose()}"} if token else {}
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional, Union

CONFIG_FILE_KEY = "TOOLHOST_PLUGIN_CONFIG"

Value = Union[str, int, bool]


class Secret:
    """A secret value; ``repr`` and ``str`` never show it, :meth:`expose`
    does."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def expose(self) -> str:
        """The value itself."""
        return self._value

    def __repr__(self) -> str:
        return "Secret(..)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class Config:
    """The configuration values and secrets toolhost gave this process."""

    def __init__(self, values: Optional[dict[str, Value]] = None, secrets: Optional[dict[str, Secret]] = None) -> None:
        self._values: dict[str, Value] = dict(values or {})
        self._secrets: dict[str, Secret] = dict(secrets or {})

    @classmethod
    def from_json(cls, text: str) -> "Config":
        """Parses toolhost's document, ``{"config": {..}, "secrets": {..}}``;
        anything else is an empty configuration."""
        try:
            doc = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(doc, dict):
            return cls()
        values = doc.get("config")
        secrets = doc.get("secrets")
        return cls(
            {k: v for k, v in values.items() if isinstance(v, (str, int, bool))} if isinstance(values, dict) else {},
            {k: Secret(str(v)) for k, v in secrets.items() if isinstance(v, (str, int, bool))}
            if isinstance(secrets, dict)
            else {},
        )

    def get(self, name: str, default: Any = None) -> Any:
        """A plain (non-secret) item's value, or ``default`` when it has
        none. Never a secret: use :meth:`secret`."""
        return self._values.get(name, default)

    def secret(self, name: str) -> Optional[Secret]:
        """A secret item's value, or ``None``."""
        return self._secrets.get(name)

    def __repr__(self) -> str:
        return f"Config(values={sorted(self._values)}, secrets={sorted(self._secrets)})"


def load() -> Config:
    """Reads (and deletes) the file toolhost wrote; empty when there is
    none (the manifest declares no ``[[config]]`` items)."""
    path = os.environ.get(CONFIG_FILE_KEY)
    if not path:
        return Config()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        print(f"cannot read the configuration toolhost gave this plugin: {e.strerror}", file=sys.stderr)
        return Config()
    finally:
        try:
            os.remove(path)
        except OSError:
            pass
    return Config.from_json(text)


config: Config = load()
"""This process's configuration, read when the SDK is imported."""
