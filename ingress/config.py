"""Read a TOML configuration file into Settings: `${ENV}` interpolation, typed decoding, cross-checks.

Every error names the key (`groups.main.endpoints[0].url`), and the line where it can be found.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from fnmatch import translate
from pathlib import Path
from typing import Any

import msgspec

from ingress.settings import Group, Settings

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
_PATH = re.compile(r"^(?P<detail>.*?)(?: - at `(?:key` in `)?\$(?P<path>[^`]*)`)?\Z", re.DOTALL)
_FIELD = re.compile(r"(?:unknown|required) field `(?P<field>[^`]+)`")


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the file, the key and the line."""


def _interpolate(value: Any, environ: Mapping[str, str], key: str) -> Any:
    if isinstance(value, str):
        def substitute(m: re.Match[str]) -> str:
            name, default = m["name"], m["default"]
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{key}: environment variable {name} is not set")
        return _VAR.sub(substitute, value)
    if isinstance(value, dict):
        return {k: _interpolate(v, environ, f"{key}.{k}" if key else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, environ, f"{key}[{i}]") for i, v in enumerate(value)]
    return value


def _line_of(text: str, key: str) -> str:
    """' (line N)' when the key's last name appears on exactly one line of the file."""
    name = re.split(r"[.\[]", key.rstrip("]"))[-1]
    if not name or name.isdigit():
        return ""
    assignment = re.compile(rf"(?:^|[\s{{,])\"?{re.escape(name)}\"?\s*=")
    header = re.compile(rf"^\s*\[\[?[^\]]*\b{re.escape(name)}\]")
    lines = [i for i, line in enumerate(text.splitlines(), 1) if assignment.search(line) or header.match(line)]
    return f" (line {lines[0]})" if len(lines) == 1 else ""


def _name_dict_keys(raw: Any, path: str) -> str:
    """msgspec writes a dict's entry as `[...]`; find which group failed and name it."""
    if path.startswith("groups[...]") and isinstance(raw, dict):
        for name, group in (raw.get("groups") or {}).items():
            try:
                msgspec.convert(group, Group)
            except msgspec.ValidationError:
                return f"groups.{name}" + path[len("groups[...]"):]
    return path


def _check(settings: Settings) -> None:
    """What types cannot say: routes name existing groups, each route selects one way, names are unique."""
    if settings.routes and not settings.groups:
        raise ConfigError("routes: routes need [groups.NAME] to send requests to")
    if settings.groups and not settings.routes:
        raise ConfigError("routes: groups need [[routes]] that send requests to them")
    if settings.groups and (settings.upstream is not None or settings.models):
        raise ConfigError("upstream: use either upstream/models or groups/routes, not both")
    groups, routes = settings.resolved()
    seen: dict[str, str] = {}
    for i, route in enumerate(routes):
        key = f"routes[{i}]"
        if sum(x is not None for x in (route.model, route.prefix, route.glob)) != 1:
            raise ConfigError(f"{key}: set exactly one of model, prefix or glob")
        if route.aliases and route.model is None:
            raise ConfigError(f"{key}.aliases: aliases need an exact model")
        for ref, target in (("group", route.group), ("fallback", route.fallback)):
            if target is not None and target not in groups:
                raise ConfigError(f"{key}.{ref}: no group named {target!r}")
        if route.glob is not None:
            re.compile(translate(route.glob))
        for name in ([route.model] if route.model else []) + route.aliases:
            if name in seen:
                raise ConfigError(f"{key}: model name {name!r} is already served by {seen[name]}")
            seen[name] = key
    for name, group in groups.items():
        for j, endpoint in enumerate(group.endpoints):
            if endpoint.url.startswith("embedded:") and settings.groups:
                raise ConfigError(f"groups.{name}.endpoints[{j}].url: 'embedded:' is only for the built-in demo")
    if settings.unix is not None and not settings.unix.startswith("/"):
        raise ConfigError("unix: the socket path must be absolute")


def parse_config(text: str, environ: Mapping[str, str] | None = None, source: str = "config") -> Settings:
    environ = os.environ if environ is None else environ
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        raw = _interpolate(raw, environ, "")
        settings = msgspec.convert(raw, Settings)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}{_line_of(text, str(exc).split(':')[0])}") from None
    except msgspec.ValidationError as exc:
        m = _PATH.match(str(exc))
        assert m is not None  # matches any string
        key = _name_dict_keys(raw, (m["path"] or "").lstrip(".")).removesuffix("[...]")
        field = _FIELD.search(m["detail"])
        if field:
            key = f"{key}.{field['field']}" if key else field["field"]
        raise ConfigError(f"{source}: {key or '(top level)'}: {m['detail']}{_line_of(text, key)}") from None
    try:
        _check(settings)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return settings


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Settings:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_config(text, environ, str(path))
