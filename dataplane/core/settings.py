"""Configuration from the environment, read in this one place.

Each component owns its configuration: a frozen dataclass next to its code
(:class:`~dataplane.queue.config.QueueConfig`, :class:`~dataplane.worker.config.WorkerConfig`,
:class:`~dataplane.bff.config.BffConfig`, ...) whose fields carry their defaults,
as named constants with their units, and say which environment variable sets
them with :func:`setting`. :func:`from_env` is the only code that reads the
environment: it fills such a dataclass (and the dataclasses nested in it) from
``os.environ`` or a given mapping, and raises :class:`ConfigError` naming the
variable that is wrong.

This module knows no component: it is below all of them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

from dataplane.core.errors import ConfigError, InvalidArgument

T = TypeVar("T")
log = logging.getLogger(__name__)

_MISSING: Any = dataclasses.MISSING


def setting(
    env: str | Sequence[str],
    default: Any = _MISSING,
    *,
    minimum: float | None = None,
    choices: Sequence[str] | None = None,
    required: str | None = None,
    old: Sequence[str] = (),
) -> Any:
    """A dataclass field set by the environment variable ``env``.

    ``env`` may name several variables: the first one set wins (a fallback such as
    ``DATAPLANE_CAPCOM_DB_URL`` then ``MAESTRO_QUEUES_URL``). ``required`` is the message
    when the field has no default and no variable is set. ``old`` names a variable's
    previous names: still read (after ``env``) for one release, with a warning.
    """
    names = (env,) if isinstance(env, str) else tuple(env)
    metadata = {
        "env": names[:1] + tuple(old) + names[1:],  # an old name aliases the first
        "old": frozenset(old),
        "minimum": minimum,
        "choices": choices,
        "required": required,
    }
    if default is _MISSING:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def nested(cls: type[Any]) -> Any:
    """A field holding another component's configuration, itself read by :func:`from_env`."""
    return dataclasses.field(default_factory=cls, metadata={"nested": True})


def env_names(cls: type[Any]) -> dict[str, str]:
    """``{field name: its first environment variable}`` of a configuration class and of
    the configurations nested in it."""
    hints = typing.get_type_hints(cls)
    names: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("nested"):
            names.update(env_names(hints[f.name]))
        elif "env" in f.metadata:
            names[f.name] = f.metadata["env"][0]
    return names


def from_env(cls: type[T], env: Mapping[str, str] | None = None, **given: Any) -> T:
    """An instance of ``cls`` from ``env`` (default: ``os.environ``).

    Fields without a variable set keep their defaults; ``given`` overrides both.
    A component's own checks (``InvalidArgument`` from ``__post_init__``) come out
    as :class:`ConfigError` with its field names replaced by their variables.
    """
    env = os.environ if env is None else env
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cast(Any, cls)):
        if f.name in given:
            values[f.name] = given[f.name]
        elif f.metadata.get("nested"):
            values[f.name] = from_env(hints[f.name], env)
        elif "env" in f.metadata:
            value = _read(env, f, hints[f.name])
            if value is not _MISSING:
                values[f.name] = value
            elif f.default is _MISSING and f.default_factory is _MISSING:
                message = f.metadata["required"] or f"{f.metadata['env'][0]} is not set"
                raise ConfigError(message)
    try:
        return cls(**values)
    except InvalidArgument as exc:
        message = str(exc)
        for name, var in env_names(cls).items():
            message = re.sub(rf"\b{name}\b", var, message)
        raise ConfigError(message) from None


def _read(env: Mapping[str, str], f: dataclasses.Field[Any], kind: Any) -> Any:
    for name in f.metadata["env"]:
        raw = env.get(name)
        if raw is not None and raw.strip() != "":
            if name in f.metadata.get("old", ()) and name not in _warned:
                _warned.add(name)
                log.warning(
                    "%s is the old name of %s: it is read for this release only, rename it",
                    name,
                    f.metadata["env"][0],
                )
            return _parse(name, raw.strip(), kind, f.metadata)
    return _MISSING


_warned: set[str] = set()  # old names warned about, once per process


def _parse(name: str, raw: str, kind: Any, meta: Mapping[str, Any]) -> Any:
    base = _base_type(kind)
    value: Any
    if base is bool:
        if raw not in ("0", "1"):
            raise ConfigError(f"{name} must be 0 or 1, got {raw!r}")
        value = raw == "1"
    elif base is int:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    elif base is float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number, got {raw!r}") from None
        if value != value:
            raise ConfigError(f"{name} must be a number, got {raw!r}")
    else:
        value = raw
    minimum = meta.get("minimum")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be >= {minimum:g}, got {raw!r}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        allowed = " or ".join(repr(c) for c in choices)
        raise ConfigError(f"{name} must be {allowed}, got {raw!r}")
    return value


def _base_type(kind: Any) -> Any:
    """``int | None`` -> ``int``; a plain type as is."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if args else kind
