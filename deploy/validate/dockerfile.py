"""dockerfile: hadolint, and the image's contract (stages, base tag, user, health check, signals,
entry point, what is copied in)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from . import common
from .common import ROOT, Result, arg_value, parse_edge_config, rel


def hadolint_binary() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            word, _, rest = whole.partition(" ")
            instructions.append((word.upper(), rest.strip()))
    return instructions


def check_dockerfile() -> Result:
    result = Result("dockerfile")
    dockerfile = common.DEPLOY / "Dockerfile"
    binary = hadolint_binary()
    if binary is None:
        result.errors.append("hadolint not found: install the dev dependencies (pip install -e '.[dev]')")
    else:
        run = subprocess.run([binary, "--config", str(common.DEPLOY / ".hadolint.yaml"), "--format", "json",
                              "--no-fail", str(dockerfile)], capture_output=True, text=True, check=False)
        try:
            findings = json.loads(run.stdout or "[]")
        except json.JSONDecodeError:
            findings = [{"line": 0, "code": "hadolint", "message": (run.stdout + run.stderr).strip()}]
        for f in findings:
            result.errors.append(f"{rel(dockerfile)}:{f.get('line')}: {f.get('code')} {f.get('message')}")
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
        result.checked.append(f"{version.strip() or 'hadolint'}: {len(findings)} findings")
    result.errors += dockerfile_contract_errors(dockerfile.read_text())
    result.checked.append("image contract")
    docker_default = common.DEPLOY / "docker" / "ingress.toml"
    config = parse_edge_config(docker_default.read_text(), {}, rel(docker_default))
    if config.error:
        result.errors.append(config.error)
    return result


COPY_ALLOWED = {"pyproject.toml", "README.md", "ingress/", "deploy/docker/ingress.toml"}


def dockerfile_contract_errors(text: str) -> list[str]:
    errors: list[str] = []
    instructions = dockerfile_instructions(text)
    args = {}
    for word, rest in instructions:
        if word == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
    stages: list[list[tuple[str, str]]] = []
    for word, rest in instructions:
        if word == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word, rest))
    if len(stages) < 2:
        errors.append("Dockerfile: not multi-stage (a builder and a final stage)")
        return errors
    for stage in stages:
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), stage[0][1].split()[0])
        name, _, tag = image.partition(":")
        if name != "python" or not re.fullmatch(r"3\.11(\.\d+)?-slim(-\w+)?", tag):
            errors.append(f"Dockerfile: base image {image!r} is not a pinned python:3.11 slim tag")
    final = stages[-1]

    def values(word: str) -> list[str]:
        return [rest for w, rest in final if w == word]

    users = values("USER")
    if not users:
        errors.append("Dockerfile: the final stage sets no USER (it would run as root)")
    else:
        user = users[-1].split(":")[0]
        if not user.isdigit() or int(user) == 0:
            errors.append(f"Dockerfile: USER {users[-1]} is not a numeric non-root UID "
                          f"(runAsNonRoot can only verify a number)")
    if not any("/healthz" in h for h in values("HEALTHCHECK")):
        errors.append("Dockerfile: no HEALTHCHECK against /healthz")
    if any("curl" in h or "wget" in h for h in values("HEALTHCHECK")):
        errors.append("Dockerfile: HEALTHCHECK uses a tool the slim image does not have")
    if values("STOPSIGNAL") != ["SIGTERM"]:
        errors.append("Dockerfile: STOPSIGNAL is not SIGTERM")
    if "8080" not in " ".join(values("EXPOSE")).split():
        errors.append("Dockerfile: EXPOSE 8080 is missing")
    if [json.loads(v) for v in values("ENTRYPOINT")] != [["ingress"]]:
        errors.append('Dockerfile: ENTRYPOINT is not ["ingress"]')
    cmd = [json.loads(v) for v in values("CMD")]
    if not cmd or cmd[-1][:1] != ["serve"] or arg_value(cmd[-1], "--config") is None:
        errors.append("Dockerfile: CMD is not `serve ... --config FILE` in exec form")
    if not any("PYTHONDONTWRITEBYTECODE=1" in v for v in values("ENV")):
        errors.append("Dockerfile: PYTHONDONTWRITEBYTECODE=1 is not set in the final stage")
    if not any("compileall" in rest for w, rest in stages[0] if w == "RUN"):
        errors.append("Dockerfile: the builder does not byte-compile (python -m compileall)")
    for word, rest in instructions:
        if word not in ("COPY", "ADD"):
            continue
        if word == "ADD":
            errors.append(f"Dockerfile: ADD {rest}: use COPY")
        if "--from=" in rest:
            continue
        sources = [s for s in rest.split() if not s.startswith("--")][:-1]
        for source in sources:
            if source not in COPY_ALLOWED:
                errors.append(f"Dockerfile: COPY {source}: only {sorted(COPY_ALLOWED)} belong in the image")
            elif not (ROOT / source).exists():
                errors.append(f"Dockerfile: COPY {source}: no such path in the repository")
    return errors
