"""Coding agent CLIs for the tests: each installed once per machine from npm at a pinned version, run with a
home of its own that nothing of the machine's leaks into, and sending nothing anywhere but the edge it is
pointed at. (Not `agents.py`: that name is the OpenAI Agents SDK's package, which tests/support/ on sys.path
would shadow.)

An agent is installed (`npm install --prefix`) into `$XDG_CACHE_HOME/ingress` (or `~/.cache/ingress`) /
`agents/<name>-<version>/`, outside the work tree, keyed by the package's pinned version: in a temporary
directory beside it, renamed into place only once the installed binary has printed that version, under a
lock file, so concurrent runs install once and a failed or interrupted install leaves nothing that looks
finished. `installed_agent()` skips the test, naming the reason, only when npm could not get the package
from its registry; any other failure fails it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from llama_engine import locked

INSTALL_TIMEOUT = 600.0  # seconds for npm: Codex's platform package alone is ~300 MB
VERSION_TIMEOUT = 60.0
# Where an agent's own npm client is sent, should it try one: a loopback port nothing listens on.
NO_REGISTRY = "http://127.0.0.1:9/"

# npm's error codes that mean its registry (or the way to it) refused or failed the request: the package
# or version missing, the registry's own errors, the network.
_REGISTRY_CODES = re.compile(r"^npm (?:error|ERR!) code (E\d{3}|ETARGET|ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|"
                             r"ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|ERR_SOCKET_TIMEOUT)\b", re.MULTILINE)


class AgentInstallError(RuntimeError):
    """npm installed the agent, but not so that it runs; or npm failed for a reason of its own."""


class RegistryRefused(AgentInstallError):
    """npm could not get the package from its registry."""


@dataclass(frozen=True)
class Agent:
    """An agent CLI: its npm package, the pinned version the tests' findings hold for, its binary."""

    name: str
    package: str
    version: str
    binary: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    @property
    def directory(self) -> Path:
        return cache_root() / "agents" / f"{self.name}-{self.version}"

    @property
    def executable(self) -> Path:
        return self.directory / "node_modules" / ".bin" / self.binary


CLAUDE_CODE = Agent("claude-code", "@anthropic-ai/claude-code", "2.1.332", "claude")
OPENCODE = Agent("opencode", "opencode-ai", "1.18.33", "opencode")
CODEX = Agent("codex", "@openai/codex", "0.171.0", "codex")  # its binary comes in @openai/codex-linux-x64
GEMINI_CLI = Agent("gemini-cli", "@google/gemini-cli", "0.61.0", "gemini")  # one bundled JavaScript package

# What keeps each agent from calling anywhere but the edge: telemetry, error reports, update checks,
# model catalogues, plugins and language servers fetched at run time; Codex's are CODEX_QUIET, Gemini CLI's
# GEMINI_QUIET (settings, not variables). Checked
# with `strace -f -e trace=network`: with these, each agent connects to the edge's loopback port alone
# (and opencode to NO_REGISTRY).
QUIET = {
    CLAUDE_CODE.name: {
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # the three above, and every call not needed to work
    },
    OPENCODE.name: {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",  # the models.dev catalogue
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # reads no ~/.claude prompts or skills
        "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
        # opencode installs @opencode-ai/plugin into each config directory in the background, whatever the
        # flags say, with the npm client built into it: that client is sent nowhere.
        "npm_config_registry": NO_REGISTRY,
    },
    CODEX.name: {},
    GEMINI_CLI.name: {},
}


# Codex's, as `-c key=value` settings: its update check, analytics, feedback uploads, and the plugins
# feature (which, on, has it resolve github.com, api.github.com and chatgpt.com at start).
CODEX_QUIET = ("check_for_update_on_startup=false", "analytics.enabled=false", "feedback.enabled=false",
               "features.plugins=false")

# Gemini CLI's, as its settings.json (`~/.gemini/settings.json`, merged with the test's own): its usage
# statistics (on, it resolves and posts to Google's Clearcut logging service, and names the installation in an
# `x-gemini-api-privileged-user-id` header to the edge), OpenTelemetry, and its update check and notice.
GEMINI_QUIET = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def cache_root() -> Path:
    """Where machine-wide installs go: never inside the work tree."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ingress"


def isolated_env(agent: Agent, home: Path, **extra: str) -> dict[str, str]:
    """The whole environment an agent runs with: a home of its own (its XDG directories and temporary
    files in it), the system's PATH with node's directory, its quiet settings, and `extra`; nothing else
    of this process's (no keys, no proxies, no config of the machine's)."""
    for sub in (".config", ".local/share", ".local/state", ".cache", "tmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    node = shutil.which("node")
    path = [str(Path(node).parent)] if node else []
    path += [p for p in ("/usr/local/bin", "/usr/bin", "/bin") if p not in path]
    return {"HOME": str(home), "PATH": ":".join(path), "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": str(home / "tmp"),
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
            "XDG_STATE_HOME": str(home / ".local/state"), "XDG_CACHE_HOME": str(home / ".cache"),
            **QUIET[agent.name], **extra}


def ensure_installed(agent: Agent) -> Path:
    """The agent's binary, installed from npm on first use and found in the cache after."""
    if agent.executable.exists():
        return agent.executable
    root = agent.directory.parent
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f"{agent.directory.name}.lock"):
        if agent.executable.exists():  # another run installed it while this one waited
            return agent.executable
        for stale in root.glob(f".{agent.directory.name}-*"):  # only the lock holder installs: interrupted
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{agent.directory.name}-", dir=root))
        try:
            _install(agent, work / "out", work / "home")
            os.replace(work / "out", agent.directory)  # atomic: nobody sees a half-made directory
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return agent.executable


def installed_agent(agent: Agent) -> Path:
    """For a test: the agent's binary; a skip naming the reason if npm's registry refused it."""
    try:
        return ensure_installed(agent)
    except RegistryRefused as exc:
        pytest.skip(f"npm could not fetch {agent.spec}: {exc}")
    except (AgentInstallError, OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"could not install {agent.spec}: {exc}")


def _install(agent: Agent, prefix: Path, home: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise AgentInstallError("npm not found on PATH")
    argv = ["nice", "-n", "10", npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
            "--no-update-notifier", agent.spec]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()[-2000:]
        if code := _REGISTRY_CODES.search(proc.stderr):
            raise RegistryRefused(f"npm error {code.group(1)}:\n{said}")
        raise AgentInstallError(f"npm install exited {proc.returncode}:\n{said}")
    exe = prefix / "node_modules" / ".bin" / agent.binary
    if not exe.exists():
        raise AgentInstallError(f"npm installed {agent.spec} without its binary {agent.binary}")
    # A package whose platform binary did not install (an optional dependency skipped, a postinstall not
    # run) keeps a placeholder that cannot say its version: never cached.
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT,
                             check=False, stdin=subprocess.DEVNULL, env=isolated_env(agent, home))
    if version.returncode != 0 or agent.version not in version.stdout:
        raise AgentInstallError(f"{exe} --version exited {version.returncode}, printing "
                                f"{(version.stdout + version.stderr).strip()[-500:]!r}, not {agent.version}")

