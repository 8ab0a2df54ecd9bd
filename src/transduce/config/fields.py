"""What the config dataclasses share: JSON round trips, checked overrides, and errors that name the
field and suggest the nearest name."""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import typing
from dataclasses import field, fields
from typing import Any, Optional


def choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        hint = difflib.get_close_matches(str(value), allowed, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ValueError(f"{name}={value!r} is not supported{extra}; choose one of "
                         f"{', '.join(allowed)}")


def unknown_key_error(key: str, known: list[str], what: str) -> ValueError:
    """An unknown name, with the known names closest to it (all of them only when they are few)."""
    hints = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    if hints:
        extra = f"; did you mean {' or '.join(repr(h) for h in hints)}?"
    elif len(known) <= 12:
        extra = f" (known: {', '.join(sorted(known))})"
    else:
        extra = (f"; none of the {len(known)} known names is close (the config classes' docstrings "
                 "list them: python -c 'import transduce; help(transduce.ModelConfig)', or "
                 "TrainConfig)")
    return ValueError(f"unknown {what} option {key!r}{extra}")


class ConfigMixin:
    """JSON round trips and checked overrides shared by the config dataclasses."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON would give them back (a tuple as a list)."""
        data = dataclasses.asdict(self)  # type: ignore[arg-type]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """A config from JSON-like ``data``, every value checked against its field's type first (a
        file written by hand or by another program gets ``d_model = '512': expected ... int``, not a
        comparison error from deep inside)."""
        if not isinstance(data, dict):
            raise ValueError(f"a {cls.__name__} is a JSON object of fields, not "
                             f"{type(data).__name__}")
        known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        for key in data:
            if key not in known:
                raise unknown_key_error(key, known, cls.__name__)
        return cls(
            **{key: check_type(key, value, field_type(cls, key)) for key, value in data.items()}
        )

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))

    def with_overrides(self, overrides: dict[str, Any]):
        """Return a copy with ``overrides`` applied; string values are parsed to the field's
        type."""
        known = {f.name: f for f in fields(self)}  # type: ignore[arg-type]
        changes = {}
        for key, value in overrides.items():
            if key not in known:
                raise unknown_key_error(key, list(known), type(self).__name__)
            kind = field_type(type(self), key)
            changes[key] = (
                parse_value(key, value, kind)
                if isinstance(value, str)
                else check_type(key, value, kind)
            )
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def field_type(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def check_type(key: str, value: Any, kind: Any) -> Any:
    """``value`` (from TOML or JSON) if it has the field's type; an int is accepted for a float."""
    args = typing.get_args(kind)
    if args and type(None) in args:  # Optional[X]
        if value is None:
            return None
        kind = next(a for a in args if a is not type(None))
    ok = (isinstance(value, bool) if kind is bool else
          isinstance(value, int) and not isinstance(value, bool) if kind is int else
          isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float else
          isinstance(value, str) if kind is str else True)
    if not ok:
        name = getattr(kind, "__name__", str(kind))
        raise ValueError(f"{key} = {value!r}: expected a value of type {name}, got "
                         f"{type(value).__name__}")
    if kind is float and not math.isfinite(value):
        raise ValueError(f"{key} = {value!r}: expected a finite number")
    return float(value) if kind is float else value


def parse_value(key: str, text: str, kind: Any) -> Any:
    """Parse ``text`` (from ``--set key=value``) into the type ``kind`` of a config field."""
    args = typing.get_args(kind)
    if args and type(None) in args:  # Optional[X]
        if text.lower() in ("none", "null", ""):
            return None
        kind = next(a for a in args if a is not type(None))
    try:
        if kind is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise ValueError(f"{key}={text!r}: expected a value of type {kind.__name__}") from None
    return text


def option(
    default: Any,
    help: str = "",
    choices: Optional[tuple] = None,
    low: Optional[float] = None,
    high: Optional[float] = None,
) -> Any:
    """A field declared once for the Python API, the command line and the server: its default,
    its help (the command-line flags are generated from it), its choices and its range ``[low,
    high]`` (``check_numbers`` enforces it, and a flag made from the field parses within it)."""
    metadata = {"help": help, "choices": choices, "low": low, "high": high}
    return field(default=default, metadata={k: v for k, v in metadata.items() if v is not None})


MAX_INT = 2**63 - 1  # what torch and numpy take as a seed or a count


def check_numbers(config: Any) -> None:
    """Every number of ``config`` finite (a NaN passes every comparison) and within its field's
    declared range; the error names the field."""
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{f.name} must be a finite number, got {value}")
        low, high = f.metadata.get("low"), f.metadata.get("high", MAX_INT)
        if low is not None and value < low:
            raise ValueError(f"{f.name} must be at least {low}, got {value}")
        if value > high:
            raise ValueError(f"{f.name} must be at most {high:,}, got {value:,}")


def at_least(config: Any, low: float, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
