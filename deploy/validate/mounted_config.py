"""The edge's configuration as its pod gives it: the TOML on the ConfigMap volume that --config names,
the container's environment (literal, and from the Secrets among the manifests) and the keys file on
the Secret volume that tenancy.keys_file names, read with the edge's own parser."""

from __future__ import annotations

import json
import re
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path

from .common import Doc, EdgeConfig, arg_value, interpolation_env, parse_edge_config, secret_data, secret_env


def mounted_file(pod: Doc, container: Doc, path: str) -> tuple[Doc | None, str | None, str | None, str | None]:
    """What the container reads at `path`: (its mount, the volume's kind, the ConfigMap's or Secret's
    name, the key in it); Nones when no volume is mounted there."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    mounts = sorted(container.get("volumeMounts") or [], key=lambda m: -len(m.get("mountPath", "")))
    for mount in mounts:
        mount_path = mount.get("mountPath", "").rstrip("/")
        if not (path.startswith(mount_path + "/") or (mount.get("subPath") and path == mount_path)):
            continue
        volume = volumes.get(mount.get("name")) or {}
        for kind, name_key in (("configMap", "name"), ("secret", "secretName")):
            if kind in volume:
                source = volume[kind] or {}
                key = mount.get("subPath") or path[len(mount_path) + 1:]
                for item in source.get("items") or []:  # items: key -> path inside the volume
                    if item.get("path") == key:
                        key = item.get("key")
                return mount, kind, source.get(name_key), key
        return mount, next((k for k in volume if k != "name"), None), None, None
    return None, None, None, None


def keys_file_config(pod: Doc, container: Doc, text: str, secrets: Mapping[str, Doc],
                     where: str) -> tuple[str | None, list[str], list[str]]:
    """The configuration's tenancy.keys_file found where the container mounts it: (the file's text, or
    None when the configuration names none; errors; notes)."""
    try:
        keys_path = ((tomllib.loads(text).get("tenancy") or {}).get("keys_file"))
    except tomllib.TOMLDecodeError:
        return None, [], []  # the edge's parser reports it
    if not isinstance(keys_path, str) or "${" in keys_path:
        return None, [], []
    mount, kind, name, key = mounted_file(pod, container, keys_path)
    errors: list[str] = []
    notes: list[str] = []
    content = ""
    if mount is None:
        errors.append(f"{where}: tenancy.keys_file {keys_path} is on no volume the edge mounts")
    elif kind != "secret":
        errors.append(f"{where}: tenancy.keys_file {keys_path} is on a {kind} volume, not a Secret")
    else:
        if mount.get("subPath"):
            errors.append(f"{where}: tenancy.keys_file {keys_path} is mounted with subPath: the kubelet never "
                          f"updates it, so a SIGHUP would re-read the old keys")
        secret = secrets.get(str(name))
        if secret is None:
            notes.append(f"keys file from Secret {name}, not among the manifests: not checked")
        elif key not in secret_data(secret):
            errors.append(f"{where}: tenancy.keys_file {keys_path}: Secret {name} has no key {key!r}")
        else:
            content = secret_data(secret)[str(key)]
    return content, errors, notes


def edge_config_for(pod: Doc, container: Doc, configmaps: Mapping[str, Doc], source: str,
                    secrets: Mapping[str, Doc] | None = None) -> EdgeConfig:
    """The TOML the edge container reads (--config), from the ConfigMap volume mounted there, with its
    environment (literal, and from the Secrets among the manifests) and its keys file (from the Secret
    volume mounted where tenancy.keys_file says)."""
    path = arg_value([str(a) for a in container.get("args") or []], "--config")
    if path is None:
        return EdgeConfig(source, error=f"{source}: the edge is started without --config")
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        mount_path = mount.get("mountPath", "").rstrip("/")
        if not path.startswith(mount_path + "/"):
            continue
        volume = volumes.get(mount.get("name")) or {}
        cm_name = (volume.get("configMap") or {}).get("name")
        if cm_name is None:
            return EdgeConfig(source, error=f"{source}: {path} is not on a ConfigMap volume")
        key = mount.get("subPath") or path[len(mount_path) + 1:]
        cm = configmaps.get(cm_name)
        if cm is None:
            return EdgeConfig(source, error=f"{source}: ConfigMap {cm_name} is not among the manifests")
        text = (cm.get("data") or {}).get(key)
        if text is None:
            return EdgeConfig(source, error=f"{source}: ConfigMap {cm_name} has no key {key!r}")
        env, notes = secret_env(container, secrets or {})
        env = {**interpolation_env(container), **env}
        keys_text, errors, more = keys_file_config(pod, container, text, secrets or {}, source)
        if errors:
            return EdgeConfig(source, error="; ".join(errors))
        config = parse_edge_config_with_keys(text, env, f"{source} ConfigMap/{cm_name}[{key}]", keys_text)
        config.notes += notes + more
        return config
    return EdgeConfig(source, error=f"{source}: no volume is mounted at the directory of {path}")


def parse_edge_config_with_keys(text: str, env: Mapping[str, str], source: str, keys_text: str | None) -> EdgeConfig:
    """parse_edge_config, with tenancy.keys_file read from `keys_text` (the mounted file's content)
    through a temporary copy; the settings keep the path as written."""
    if keys_text is None:
        return parse_edge_config(text, env, source)
    keys_path = tomllib.loads(text)["tenancy"]["keys_file"]
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "keys.toml"
        copy.write_text(keys_text)
        quoted = re.compile(r"([\"'])" + re.escape(keys_path) + r"\1")
        config = parse_edge_config(quoted.sub(lambda m: json.dumps(str(copy)), text, count=1), env, source)
    config.keys_file = keys_text
    if config.settings is not None:
        import msgspec

        tenancy = msgspec.structs.replace(config.settings.tenancy, keys_file=keys_path)
        config.settings = msgspec.structs.replace(config.settings, tenancy=tenancy)
    elif config.error:
        config.error = config.error.replace(str(copy), keys_path)
    return config
