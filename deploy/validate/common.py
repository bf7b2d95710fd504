"""What every check shares: where deploy/ is, the result of a check, reading manifests, and the edge's
own parsers applied to what a container will run."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import re
import socket
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[1]  # deploy/, this package's parent
ROOT = DEPLOY.parent
if str(ROOT) not in sys.path:  # the edge's own configuration parser, when run as a script
    sys.path.insert(0, str(ROOT))


# The edge's drain defaults (ingress/settings.py Drain), used when a configuration cannot be read.
DRAIN_DELAY_S = 5.0
DRAIN_DEADLINE_S = 30.0


# What a variable the edge reads from a Secret that is not among the manifests stands in as: the one
# such variable the configurations here read is tenancy.redis.url (its password kept in a Secret).
UNRESOLVED_SECRET = "redis://value-from-a-secret.invalid:6379/0"


Doc = dict[str, Any]


@dataclasses.dataclass
class Result:
    name: str
    errors: list[str] = dataclasses.field(default_factory=list)
    checked: list[str] = dataclasses.field(default_factory=list)
    skipped: str | None = None

    @property
    def status(self) -> str:
        return "FAIL" if self.errors else "skip" if self.skipped else "ok"


# --- helpers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """Refuse every connection but Unix sockets: a check that tries the network fails loudly."""
    real_connect = socket.socket.connect
    real_create = socket.create_connection

    def connect(self: socket.socket, address: Any) -> None:
        if self.family == socket.AF_UNIX:
            return real_connect(self, address)
        raise OSError(f"deploy/validate runs offline: refused a connection to {address!r}")

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        raise OSError(f"deploy/validate runs offline: refused a connection to {address!r}")

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.create_connection = create_connection
    try:
        yield
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]
        socket.create_connection = real_create


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def load_docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def k8s_sets() -> dict[str, list[tuple[str, Doc]]]:
    """The plain manifests, by directory: each directory is one deployment."""
    sets: dict[str, list[tuple[str, Doc]]] = {}
    for path in sorted((DEPLOY / "k8s").rglob("*.yaml")):
        sets.setdefault(rel(path.parent), []).extend((rel(path), d) for d in load_docs(path))
    return sets


def kind_name(doc: Doc) -> str:
    return f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"


def seconds(value: Any) -> float:
    """A compose duration (`45s`, `1m30s`, `500ms`) or a number of seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    total, units = 0.0, {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(value))
    if not parts or "".join(n + u for n, u in parts) != str(value):
        raise ValueError(f"not a duration: {value!r}")
    for number, unit in parts:
        total += float(number) * units[unit]
    return total


def cpu_cores(quantity: Any) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def interpolation_env(container: Doc) -> dict[str, str]:
    """What the edge's ${VAR} interpolation sees: the container's literal environment values."""
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}


def secret_data(secret: Doc) -> dict[str, str]:
    """A Secret's data as text: stringData over the base64 data, as the API server merges them."""
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    data.update({k: str(v) for k, v in (secret.get("stringData") or {}).items()})
    return data


def secret_env(container: Doc, secrets: Mapping[str, Doc]) -> tuple[dict[str, str], list[str]]:
    """The container's variables from secretKeyRef: the Secret's value when it is among the manifests,
    else UNRESOLVED_SECRET (and a note saying so)."""
    env: dict[str, str] = {}
    notes: list[str] = []
    for e in container.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if not ref:
            continue
        secret = secrets.get(ref.get("name"))
        value = secret_data(secret).get(ref.get("key")) if secret is not None else None
        if value is None:
            notes.append(f"{e['name']} from Secret {ref.get('name')}[{ref.get('key')}], not among the manifests: "
                         f"stands in as {UNRESOLVED_SECRET}")
            value = UNRESOLVED_SECRET
        env[e["name"]] = value
    return env, notes


@dataclasses.dataclass
class EdgeConfig:
    """An edge configuration found in a manifest, parsed with the edge's own parser."""

    source: str
    settings: Any = None  # ingress.settings.Settings
    error: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)  # what could not be checked, and why
    keys_file: str | None = None  # the keys file's text, as mounted (tenancy.keys_file)

    @property
    def drain_total(self) -> float:
        drain = getattr(self.settings, "drain", None)
        if drain is None:
            return DRAIN_DELAY_S + DRAIN_DEADLINE_S
        return float(drain.delay) + float(drain.deadline)


def parse_edge_config(text: str, env: Mapping[str, str], source: str) -> EdgeConfig:
    try:
        from ingress.config import ConfigError, parse_config
    except ImportError as exc:  # pragma: no cover - the project is installed wherever this runs
        return EdgeConfig(source, error=f"cannot import the edge's configuration parser: {exc}")
    try:
        return EdgeConfig(source, settings=parse_config(text, env, source))
    except ConfigError as exc:
        return EdgeConfig(source, error=str(exc))


def arg_value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def command_of(container: Doc) -> list[str]:
    """What the container runs: its command, then its args, as text."""
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


def is_edge(container: Doc) -> bool:
    args = command_of(container)
    return (bool(args) and args[0] in ("serve", "ingress") and "demo-upstream" not in args
            and "bridge" not in args[:2])


def bridge_args(container: Doc) -> list[str] | None:
    """The arguments after `ingress bridge` when the container runs a bridge, else None."""
    args = command_of(container)
    if args[:1] == ["ingress"]:
        args = args[1:]
    return args[1:] if args[:1] == ["bridge"] else None


def env_names(container: Doc) -> set[str] | None:
    """The environment variables the container sets (literal or from a Secret); None when an envFrom
    makes the set unknowable here."""
    if container.get("envFrom"):
        return None
    return {str(e.get("name")) for e in container.get("env") or []}


def on_a_mount(container: Doc, path: str) -> bool:
    return any(path.startswith(m.get("mountPath", "").rstrip("/") + "/") for m in container.get("volumeMounts") or [])


def prestop_sleep(container: Doc) -> float | None:
    sleep = (((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds")
    return float(sleep) if isinstance(sleep, (int, float)) else None
