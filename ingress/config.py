"""Read a TOML configuration file into Settings: `${ENV}` interpolation, typed decoding, cross-checks.

Every error names the key (`groups.main.endpoints[0].url`), and the line where it can be found.
"""

from __future__ import annotations

import collections
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from fnmatch import translate
from pathlib import Path
from typing import Any

import msgspec

from ingress.admin.settings import admin_problem
from ingress.guardrails import Guardrails, check_guardrails
from ingress.oai.codec import validation_path
from ingress.routing.chain import route_name
from ingress.settings import Bridge, Group, Route, Settings, Tracing
from ingress.tenancy.policy import read_keys_file
from ingress.tenancy.settings import ModelPolicy, Tenancy, Tenant, issuers_problem
from ingress.tenancy.stores.resp import address_of
from ingress.tokens import tokenizer_problem

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


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


_USERINFO = re.compile(r"^https?://[^/]*@")

_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\]]+?)\s*\]\]?\s*(?:#.*)?$")


def _assigns(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?:^|[\s{{,])\"?{re.escape(name)}\"?\s*=")


def _line_of(text: str, key: str) -> str:
    """' (line N)' for a key path such as `groups.main.endpoints[1].url` or `routes[2].group`, found
    inside its own table (the N-th [[routes]], the endpoints' N-th inline table); '' when not found."""
    lines = text.splitlines()
    parts = re.findall(r"\[\d+\]|[^.\[\]]+", key)
    headers = [(i, m["name"].replace('"', "")) for i, line in enumerate(lines) if (m := _HEADER.match(line))]
    start, end, rest = 0, headers[0][0] if headers else len(lines), parts
    for depth in (2, 1):  # the deepest table header the key starts with: [groups.main], [timeouts]...
        name = ".".join(parts[:depth])
        if len(parts) > depth and parts[depth].startswith("[") and depth == 1:  # an array of tables
            wanted = int(parts[1][1:-1])
            found = [i for i, h in headers if h == name]
            if wanted < len(found):
                start = found[wanted]
                rest = parts[2:]
                break
        found = [i for i, h in headers if h == name]
        if len(found) == 1:
            start, rest = found[0], parts[depth:]
            break
    else:
        start = -1
    if start >= 0:
        end = next((i for i, _ in headers if i > start), len(lines))
    if not rest:
        return f" (line {start + 1})" if start >= 0 else ""
    section = range(start + 1, end)
    names = [p for p in rest if not p.startswith("[")]
    if len(rest) >= 3 and rest[1].startswith("["):  # endpoints[1].url: the N-th `url =` after `endpoints =`
        first = next((i for i in section if _assigns(rest[0]).search(lines[i])), None)
        if first is None:
            return ""
        hits = [i for i in range(first, end) if _assigns(rest[2]).search(lines[i])]
        index = int(rest[1][1:-1])
        return f" (line {hits[index] + 1})" if index < len(hits) else ""
    hits = [i for i in section if _assigns(names[-1]).search(lines[i])] if names else []
    return f" (line {hits[0] + 1})" if len(hits) == 1 else ""


def _name_dict_keys(raw: Any, path: str) -> str:
    """msgspec writes a dict's entry as `[...]`; find which entry failed and name it."""
    for where, kind in (("groups", Group), ("tenancy.tenants", Tenant), ("tenancy.models", ModelPolicy)):
        if not path.startswith(f"{where}[...]"):
            continue
        table: Any = raw
        for part in where.split("."):
            table = table.get(part) if isinstance(table, dict) else None
        for name, entry in (table or {}).items():
            try:
                msgspec.convert(entry, kind)
            except msgspec.ValidationError:
                return f"{where}.{name}" + path[len(f"{where}[...]"):]
    return path


def _check(settings: Settings) -> None:
    """What types cannot say: routes name existing groups, each route selects one way, names are unique."""
    if settings.routes and not settings.groups:
        raise ConfigError("routes: routes need [groups.NAME] to send requests to")
    if settings.groups and not settings.routes:
        raise ConfigError("routes: groups need [[routes]] that send requests to them")
    if settings.groups and (settings.upstream is not None or settings.models):
        raise ConfigError("upstream: use either upstream/models or groups/routes, not both")
    overload = settings.overload
    if not overload.min_limit <= overload.initial_limit <= overload.max_limit:
        raise ConfigError("overload: the limits need min_limit <= initial_limit <= max_limit")
    groups, routes = settings.resolved()
    seen: dict[str, str] = {}
    for i, route in enumerate(routes):
        key = f"routes[{i}]"
        selectors = [name for name in ("model", "prefix", "glob") if getattr(route, name) is not None]
        if not selectors and route.name is not None:  # reached from other routes only
            if route.upstream_model is None:
                raise ConfigError(f"{key}.upstream_model: a route with only a name (reached as a fallback or a "
                                  "split's variant) must name the model it sends")
            if route.aliases:
                raise ConfigError(f"{key}.aliases: aliases need an exact model")
        elif len(selectors) != 1:
            where = f"{key}.{selectors[1]}" if selectors else key
            raise ConfigError(f"{where}: set exactly one of model, prefix or glob (or only a name, for a route "
                              "reached as a fallback or a split's variant)")
        if route.aliases and route.model is None:
            raise ConfigError(f"{key}.aliases: aliases need an exact model")
        for ref, target in (("group", route.group), ("fallback", route.fallback)):
            if target is not None and target not in groups:
                raise ConfigError(f"{key}.{ref}: no group named {target!r}")
        if route.glob is not None:
            re.compile(translate(route.glob))
        if route.count_tokens == "provider" and route.provider not in ("anthropic", "gemini"):
            raise ConfigError(f"{key}.count_tokens: \"provider\" needs provider = \"anthropic\" or \"gemini\" (its "
                              "bridge asks the provider to count)")
        if route.cache is not None and route.cache.backend == "redis" and (
                settings.tenancy is None or settings.tenancy.redis is None):
            raise ConfigError(f"{key}.cache.backend: \"redis\" uses the tenancy's server; set [tenancy] "
                              "redis = { url = \"redis://...\" }")
        if route.tokenizer is not None and (problem := tokenizer_problem(route.tokenizer)):
            raise ConfigError(f"{key}.tokenizer: {problem}")
        affine = [g for g in (route.group, route.fallback) if g in groups and groups[g].balance == "cache_affine"]
        if route.affinity_header is not None and not affine:
            raise ConfigError(f"{key}.affinity_header: the route's groups balance by p2c, which has no use for an "
                              "affinity key; set balance = \"cache_affine\" on its group")
        for name in ([route.model] if route.model else []) + route.aliases:
            if name in seen:
                raise ConfigError(f"{key}: model name {name!r} is already served by {seen[name]}")
            seen[name] = key
    _check_policies(routes)
    for name, group in groups.items():
        if group.affinity is not None and group.balance != "cache_affine":
            raise ConfigError(f"groups.{name}.affinity: only a group with balance = \"cache_affine\" uses it")
        for j, endpoint in enumerate(group.endpoints):
            key = f"groups.{name}.endpoints[{j}].url" if settings.groups else "upstream"
            if (endpoint.url is None) == (endpoint.bridge is None):
                raise ConfigError(f"groups.{name}.endpoints[{j}]: give either url (an internal service) or bridge "
                                  "(an engine the edge reaches through a bridge it runs)")
            if endpoint.bridge is not None:
                _check_bridge(endpoint.bridge, f"groups.{name}.endpoints[{j}].bridge")
                continue
            assert endpoint.url is not None
            if endpoint.url.startswith("embedded:") and settings.groups:
                raise ConfigError(f"{key}: 'embedded:' is only for the built-in demo")
            if _USERINFO.match(endpoint.url):  # the message must not repeat the URL: it holds a secret
                raise ConfigError(f"{key}: credentials (user:password@) are not allowed in an endpoint URL; "
                                  "they would be sent in the Host header and shown in logs and metrics")
    if settings.unix is not None and not settings.unix.startswith("/"):
        raise ConfigError("unix: the socket path must be absolute")
    if settings.tenancy is not None:
        _check_tenancy(settings.tenancy)
    if settings.responses.backend == "redis" and (settings.tenancy is None or settings.tenancy.redis is None):
        raise ConfigError("responses.backend: \"redis\" keeps responses in the [tenancy] store's Redis; "
                          "configure [tenancy] redis = { url = \"redis://...\" }, or use backend = \"memory\"")
    if settings.tracing is not None:
        _check_tracing(settings.tracing)
    if settings.admin is not None and (problem := admin_problem(
            settings.admin, settings.tenancy, None if settings.unix else (settings.host, settings.port),
            settings.workers)) is not None:
        raise ConfigError(problem)


def _check_policies(routes: tuple[Route, ...]) -> None:
    """Fallback chains and splits name routes that exist, once each; a split's variants do not split
    again (which could loop) and its weights add up to something; every option has its use."""
    named: dict[str, int] = {}
    for i, route in enumerate(routes):
        name = route_name(route)
        if route.name is not None and name in named:
            raise ConfigError(f"routes[{i}].name: {name!r} already names routes[{named[name]}]")
        named.setdefault(name, i)
    ambiguous = {name for name, n in collections.Counter(route_name(r) for r in routes).items() if n > 1}

    def target(where: str, name: str) -> Route:
        if name not in named:
            raise ConfigError(f"{where}: no route named {name!r} (a route is named by its name, else its model, "
                              "prefix or glob)")
        if name in ambiguous:
            raise ConfigError(f"{where}: more than one route is called {name!r}; give the one meant a name")
        return routes[named[name]]

    for i, route in enumerate(routes):
        key, name = f"routes[{i}]", route_name(route)
        if route.fallbacks and route.fallback is not None:
            raise ConfigError(f"{key}.fallback: give fallbacks (routes, each with its group and model) or fallback "
                              "(a group of the same route), not both; a fallback group is the route itself with "
                              "that group: name such a route and list it in fallbacks")
        if route.fallback_on != ("unavailable",) and not route.fallbacks:
            raise ConfigError(f"{key}.fallback_on: it chooses when the routes of fallbacks are tried; this route "
                              "has none")
        if not route.fallback_on:
            raise ConfigError(f"{key}.fallback_on: list at least one class of failure (\"unavailable\" is the default)")
        if len(set(route.fallback_on)) != len(route.fallback_on):
            raise ConfigError(f"{key}.fallback_on: a class is listed twice")
        for j, fallback in enumerate(route.fallbacks):
            target(f"{key}.fallbacks[{j}]", fallback)
            if fallback == name:
                raise ConfigError(f"{key}.fallbacks[{j}]: a route cannot fall back on itself (a cycle); list "
                                  "another route")
            if fallback in route.fallbacks[:j]:
                raise ConfigError(f"{key}.fallbacks[{j}]: {fallback!r} is listed twice")
        if route.split_by == "header" and route.split_header is None:
            raise ConfigError(f"{key}.split_header: split_by = \"header\" needs the header's name")
        if route.split_header is not None and route.split_by != "header":
            raise ConfigError(f"{key}.split_header: only split_by = \"header\" uses it")
        if route.split_header is not None and not route.split:
            raise ConfigError(f"{key}.split_header: the route has no split")
        if not route.split:
            continue
        if len(route.split) < 2:
            raise ConfigError(f"{key}.split: a split needs two variants or more (the route itself may be one)")
        if sum(share.weight for share in route.split) <= 0:
            raise ConfigError(f"{key}.split: the weights add up to 0; give a variant a weight")
        seen: set[str] = set()
        for j, share in enumerate(route.split):
            where = f"{key}.split[{j}].route"
            variant = target(where, share.route)
            if share.route in seen:
                raise ConfigError(f"{where}: {share.route!r} is listed twice")
            seen.add(share.route)
            if variant is not route and variant.split:
                raise ConfigError(f"{where}: {share.route!r} splits too; a split's variants must not split again "
                                  "(a split of splits could be a cycle)")
            if variant.model is None and variant.upstream_model is None and variant is not route:
                raise ConfigError(f"{where}: {share.route!r} is a prefix or glob route without an upstream_model; a "
                                  "variant must name the model it sends")


def _check_tracing(tracing: Tracing) -> None:
    """Every header's variable is set (an export refused for want of its credentials would drop every
    span, silently but for a counter)."""
    if tracing.max_batch > tracing.max_queue:
        raise ConfigError("tracing.max_batch: a batch cannot be larger than max_queue")
    for header, env in tracing.headers_env.items():
        if not os.environ.get(env):
            raise ConfigError(f"tracing.headers_env.{header}: the environment variable {env} is not set")


def _check_tenancy(tenancy: Tenancy) -> None:
    """The store is configured, every key is unique and names a declared tenant; a keys file is read."""
    if tenancy.backend == "redis" and tenancy.redis is None:
        raise ConfigError("tenancy.redis: backend = \"redis\" needs redis = { url = \"redis://...\" }")
    if tenancy.backend == "memory" and tenancy.redis is not None:
        raise ConfigError("tenancy.backend: redis is configured but backend is \"memory\"; set backend = \"redis\"")
    if tenancy.redis is not None:
        try:
            address_of(tenancy.redis.url)  # what the store's client can connect to (the message hides the URL)
        except ValueError as exc:
            raise ConfigError(f"tenancy.redis.url: {exc}") from None
    keys, tenants = list(tenancy.keys), dict(tenancy.tenants)
    if tenancy.keys_file is not None:
        try:
            extra = read_keys_file(tenancy.keys_file)
        except ValueError as exc:
            raise ConfigError(f"tenancy.keys_file: {exc}") from None
        keys += extra.keys
        tenants.update(extra.tenants)
    seen: set[str] = set()
    for i, key in enumerate(keys):
        where = f"tenancy.keys[{i}]" if i < len(tenancy.keys) else f"tenancy.keys_file: keys[{i - len(tenancy.keys)}]"
        if key.id in seen:
            raise ConfigError(f"{where}.id: the key id {key.id!r} is used twice")
        seen.add(key.id)
        if key.tenant not in tenants:
            raise ConfigError(f"{where}.tenant: no tenant named {key.tenant!r}; declare it as "
                              f"[tenancy.tenants.{key.tenant}]")
        if not key.models:
            raise ConfigError(f"{where}.models: a key must be allowed at least one model (a name or a glob)")
        _check_rules(key.guardrails, f"{where}.guardrails")
    for name, tenant in tenants.items():
        _check_rules(tenant.guardrails, f"tenancy.tenants.{name}.guardrails")
    if (problem := issuers_problem(tenancy.issuers, tenants)) is not None:
        raise ConfigError(problem)


def _check_rules(rules: Guardrails | None, where: str) -> None:
    if rules is not None:
        try:
            check_guardrails(rules)
        except ValueError as exc:
            raise ConfigError(f"{where}.{exc}") from None


def _check_bridge(bridge: Bridge, key: str) -> None:
    if bridge.api_key_env is not None and bridge.api_key_file is not None:
        raise ConfigError(f"{key}: give one of api_key_env and api_key_file")
    if _USERINFO.match(bridge.target):
        raise ConfigError(f"{key}.target: credentials are not allowed in the target URL; use api_key_env or "
                          "api_key_file")


def parse_config(text: str, environ: Mapping[str, str] | None = None, source: str = "config") -> Settings:
    environ = os.environ if environ is None else environ
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        raw = _interpolate(raw, environ, "")
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}{_line_of(text, str(exc).split(':')[0])}") from None
    return _settings_of(raw, source, lambda key: _line_of(text, key))


def override(settings: Settings, changes: Mapping[str, Any], source: str = "command line") -> Settings:
    """`settings` with `changes` (command-line flags) applied, checked exactly as a file's keys are."""
    return _settings_of({**msgspec.to_builtins(settings), **msgspec.to_builtins(changes)}, source)


def tracing_config(endpoint: str | None, sample_ratio: float | None, service_name: str) -> Tracing | None:
    """`[tracing]` from command-line flags (`ingress bridge --trace-endpoint`), checked as the file's is."""
    if endpoint is None:
        if sample_ratio is not None:
            raise ConfigError("--trace-sample-ratio needs --trace-endpoint")
        return None
    raw = {"endpoint": endpoint, "service_name": service_name,
           **({"sample_ratio": sample_ratio} if sample_ratio is not None else {})}
    try:
        tracing = msgspec.convert(raw, Tracing)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"--trace-*: {exc}") from None
    _check_tracing(tracing)
    return tracing


def bridge_config(raw: Mapping[str, Any], source: str = "command line") -> Bridge:
    """A bridge's settings (`ingress bridge` flags), checked as an endpoint's `bridge` in a file is."""
    try:
        bridge = msgspec.convert(raw, Bridge)
    except msgspec.ValidationError as exc:
        detail, path = validation_path(exc)
        raise ConfigError(f"{source}: {path or '(top level)'}: {detail}") from None
    _check_bridge(bridge, source)
    return bridge


def _settings_of(raw: Any, source: str, line_of: Callable[[str], str] = lambda key: "") -> Settings:
    """`raw` decoded into Settings and cross-checked; an error names the source, the key and, for a
    file, the line where the key is."""
    try:
        settings = msgspec.convert(raw, Settings)
    except msgspec.ValidationError as exc:
        detail, path = validation_path(exc)
        key = _name_dict_keys(raw, path).removesuffix("[...]")
        raise ConfigError(f"{source}: {key or '(top level)'}: {detail}{line_of(key)}") from None
    try:
        _check(settings)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}{line_of(str(exc).split(':')[0])}") from None
    return settings


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Settings:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_config(text, environ, str(path))
