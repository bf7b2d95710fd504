"""Configuration files: a full example decodes into Settings; every mistake is named by key and line."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from ingress.__main__ import main
from ingress.config import ConfigError, load_config, parse_config
from ingress.log import configure
from ingress.routing.table import RouteTable
from ingress.settings import Ejection, Endpoint, HealthCheck, Timeouts

ROOT = Path(__file__).resolve().parents[2]

# Two groups, three endpoints (one on a Unix socket), every kind of route. Keys that the error tests
# below break appear once in the file, so their line can be named.
EXAMPLE = """\
port = 9090

[timeouts]
connect = 2.0
heartbeat = 5.0

[retry]
attempts = 1
budget_ratio = 0.1

[groups.primary]
endpoints = [
  { url = "http://10.0.0.11:9000", weight = 3, keepalive = 1.5 },
  { url = "${BACKUP_URL:-http://10.0.0.12:9000}", max_in_flight = 8 },
]
max_in_flight = 32
max_queue = 16
queue_timeout = 2.5
health_check = { path = "/ready", interval = 2.0, timeout = 0.5 }
ejection = { failures = 2, base = 1.0, max = 30.0 }

[groups.local]
endpoints = [{ url = "unix:/run/llm/model.sock" }]

[[routes]]
model = "gpt-4o"
aliases = ["gpt-4o-latest", "4o"]
group = "primary"
fallback = "local"

[[routes]]
prefix = "llama-"
group = "local"
provider = "self_hosted"
extra_fields = "forward"
timeouts = { first_byte = 120.0, idle = 60.0, heartbeat = 1.0 }

[[routes]]
glob = "*-mini"
upstream_model = "gpt-4o-mini"
group = "primary"
"""


def _line(text: str, fragment: str) -> int:
    """The 1-based line of the only line of `text` containing `fragment`."""
    lines = [i for i, line in enumerate(text.splitlines(), 1) if fragment in line]
    assert len(lines) == 1, (fragment, lines)
    return lines[0]


def _error(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, environ={} if environ is None else environ, source="ingress.toml")
    return str(caught.value)


def _edit(old: str, new: str) -> str:
    assert EXAMPLE.count(old) == 1, old
    return EXAMPLE.replace(old, new)


# --- the full example ---------------------------------------------------------------------------


def test_the_full_example_decodes() -> None:
    settings = parse_config(EXAMPLE, environ={})

    assert settings.port == 9090
    assert settings.timeouts == Timeouts(connect=2.0, heartbeat=5.0)
    assert (settings.retry.attempts, settings.retry.budget_ratio, settings.retry.budget_min_per_s) == (1, 0.1, 3.0)
    groups, routes = settings.resolved()
    assert groups is settings.groups and routes is settings.routes
    assert set(groups) == {"primary", "local"}
    primary, local = groups["primary"], groups["local"]
    assert primary.endpoints == [Endpoint(url="http://10.0.0.11:9000", weight=3, keepalive=1.5),
                                 Endpoint(url="http://10.0.0.12:9000", max_in_flight=8)]
    assert primary.endpoints[1].keepalive == 4.0  # below the 5 s after which common servers close idle connections
    assert (primary.max_in_flight, primary.max_queue, primary.queue_timeout) == (32, 16, 2.5)
    assert primary.health_check == HealthCheck(path="/ready", interval=2.0, timeout=0.5)
    assert primary.ejection == Ejection(failures=2, base=1.0, max=30.0)
    assert local.endpoints == [Endpoint(url="unix:/run/llm/model.sock")]
    assert local.health_check is None and local.ejection == Ejection()

    exact, prefix, glob = routes
    assert (exact.model, exact.aliases, exact.group, exact.fallback) == ("gpt-4o", ["gpt-4o-latest", "4o"],
                                                                         "primary", "local")
    assert (prefix.prefix, prefix.group, prefix.provider) == ("llama-", "local", "self_hosted")
    assert (exact.extra_fields, prefix.extra_fields, glob.extra_fields) == ("refuse", "forward", "refuse")
    assert prefix.timeouts == Timeouts(first_byte=120.0, idle=60.0, heartbeat=1.0)
    assert (glob.glob, glob.upstream_model, glob.timeouts) == ("*-mini", "gpt-4o-mini", None)
    assert RouteTable(routes).listed_models() == ["4o", "gpt-4o", "gpt-4o-latest"]


def test_an_environment_variable_replaces_its_default() -> None:
    settings = parse_config(EXAMPLE, environ={"BACKUP_URL": "unix:/run/backup.sock"})

    assert settings.groups["primary"].endpoints[1].url == "unix:/run/backup.sock"


def test_interpolation_reaches_every_string_and_only_strings() -> None:
    text = _edit('path = "/ready"', 'path = "/${CHECK:-ready}/${SUFFIX}"')

    settings = parse_config(text, environ={"SUFFIX": "now", "UNUSED": "x"})

    check = settings.groups["primary"].health_check
    assert check is not None and check.path == "/ready/now"


def test_the_shipped_example_decodes() -> None:
    settings = load_config(ROOT / "deploy" / "ingress.toml", environ={})

    groups, routes = settings.resolved()
    assert sum(len(g.endpoints) for g in groups.values()) == 3
    assert {r.group for r in routes} <= set(groups)


# --- errors name the key and, where it can be found, the line -----------------------------------

def _route_header(text: str, index: int) -> int:
    """The line of the `index`-th [[routes]] header."""
    return [i for i, line in enumerate(text.splitlines(), 1) if line == "[[routes]]"][index]


KEYED_ERRORS = [  # the edit, the key, what is wrong, and a fragment of the line to name (int: the n-th route)
    pytest.param("max_queue = 16", "max_queue = 16\nmax_qeue = 3", "groups.primary.max_qeue",
                 "unknown field `max_qeue`", "max_qeue = 3", id="unknown-key"),
    pytest.param("port = 9090", "port = 9090\nlisten = 1", "listen", "unknown field `listen`", "listen = 1",
                 id="unknown-top-level-key"),
    pytest.param("queue_timeout = 2.5", 'queue_timeout = "soon"', "groups.primary.queue_timeout",
                 "Expected `float`, got `str`", "queue_timeout", id="wrong-type"),
    pytest.param("failures = 2", "failures = 0", "groups.primary.ejection.failures", "Expected `int` >= 1",
                 "failures = 0", id="out-of-range-in-inline-table"),
    pytest.param("attempts = 1", "attempts = 9", "retry.attempts", "Expected `int` <= 5", "attempts = 9",
                 id="out-of-range"),
    pytest.param("weight = 3", 'weight = "3"', "groups.primary.endpoints[0].weight", "Expected `int`, got `str`",
                 'weight = "3"', id="wrong-type-in-a-list"),
    pytest.param("keepalive = 1.5", "keepalive = 0", "groups.primary.endpoints[0].keepalive", "Expected `float` > 0",
                 "keepalive = 0", id="out-of-range-in-a-list"),
    pytest.param('"unix:/run/llm/model.sock"', '"ftp://10.0.0.13"', "groups.local.endpoints[0].url",
                 "Expected `str` matching regex", "ftp://10.0.0.13", id="bad-endpoint-url"),
    pytest.param("${BACKUP_URL:-http://10.0.0.12:9000}", "${BACKUP_URL:-10.0.0.12:9000}",
                 "groups.primary.endpoints[1].url", "Expected `str` matching regex", "-10.0.0.12:9000",
                 id="bad-default-in-the-second-endpoint-url"),
    pytest.param('"http://10.0.0.11:9000"', '"http://10.0.0.11:9000/v1"', "groups.primary.endpoints[0].url",
                 "Expected `str` matching regex", "/v1", id="endpoint-url-with-a-path"),
    pytest.param('idle = 60.0, heartbeat = 1.0', 'idle = 60.0, heartbeat = -1', "routes[1].timeouts.heartbeat",
                 "Expected `float` > 0.0", "heartbeat = -1", id="a-routes-timeout"),
    pytest.param('group = "local"\nprovider', 'group = "nowhere"\nprovider', "routes[1].group",
                 "no group named 'nowhere'", '"nowhere"', id="route-to-a-missing-group"),
    pytest.param('extra_fields = "forward"', 'extra_fields = "drop"', "routes[1].extra_fields",
                 "Invalid enum value 'drop'", 'extra_fields = "drop"', id="extra-fields-neither-refuse-nor-forward"),
    pytest.param('fallback = "local"', 'fallback = "elsewhere"', "routes[0].fallback",
                 "no group named 'elsewhere'", '"elsewhere"', id="fallback-to-a-missing-group"),
    pytest.param('prefix = "llama-"', 'prefix = "llama-"\nglob = "llama*"', "routes[1].glob",
                 "set exactly one of model, prefix or glob", 'glob = "llama*"', id="two-selectors"),
    pytest.param('glob = "*-mini"', 'provider = "openai"', "routes[2]",
                 "set exactly one of model, prefix or glob", 2, id="no-selector"),
    pytest.param('glob = "*-mini"', 'model = "4o"', "routes[2]", "model name '4o' is already served by routes[0]",
                 2, id="duplicate-model-name"),
    pytest.param('prefix = "llama-"', 'prefix = "llama-"\naliases = ["llama"]', "routes[1].aliases",
                 "aliases need an exact model", 'aliases = ["llama"]', id="aliases-without-a-model"),
    pytest.param("${BACKUP_URL:-http://10.0.0.12:9000}", "${BACKUP_URL}", "groups.primary.endpoints[1].url",
                 "environment variable BACKUP_URL is not set", "${BACKUP_URL}", id="missing-environment-variable"),
]


@pytest.mark.parametrize(("old", "new", "key", "detail", "line_of"), KEYED_ERRORS)
def test_an_error_names_the_key_and_the_line(old: str, new: str, key: str, detail: str, line_of: str | int) -> None:
    text = _edit(old, new)

    message = _error(text)

    assert message.startswith(f"ingress.toml: {key}: "), message
    assert detail in message
    line = _route_header(text, line_of) if isinstance(line_of, int) else _line(text, line_of)
    assert message.endswith(f" (line {line})"), message


def test_a_toml_syntax_error_names_its_line() -> None:
    text = _edit("max_queue = 16", "max_queue = = 16")

    message = _error(text)

    assert message.startswith("ingress.toml: ")
    assert f"line {_line(text, 'max_queue = = 16')}" in message


def test_a_line_is_found_inside_the_keys_own_table() -> None:
    text = _edit('upstream_model = "gpt-4o-mini"', 'weight = 3\nupstream_model = "gpt-4o-mini"')  # weight twice

    message = _error(text)

    assert message.startswith("ingress.toml: routes[2].weight: ")
    assert message.endswith(f" (line {_route_header(text, 2) + 2})"), message  # not the endpoint's weight


@pytest.mark.parametrize(("text", "key"), [
    pytest.param('[groups.g]\nmax_queue = 1\n[[routes]]\nmodel = "m"\ngroup = "g"\n', "groups.g.endpoints",
                 id="a-missing-table-key"),
    pytest.param('[[routes]]\nmodel = "m"\n[groups.g]\nendpoints = [{ url = "http://a:1" }]\n', "routes[0].group",
                 id="a-missing-route-key"),
])
def test_a_missing_key_names_no_line(text: str, key: str) -> None:
    message = _error(text)

    assert message.startswith(f"ingress.toml: {key}: Object missing required field"), message
    assert "(line" not in message


@pytest.mark.parametrize(("text", "key", "detail"), [
    pytest.param('[groups.g]\nendpoints = [{ url = "http://a:1" }]\n', "routes", "groups need [[routes]]",
                 id="groups-without-routes"),
    pytest.param('[[routes]]\nmodel = "m"\ngroup = "g"\n', "routes", "routes need [groups.NAME]",
                 id="routes-without-groups"),
    pytest.param('upstream = "http://a:1"\n[groups.g]\nendpoints = [{ url = "http://a:1" }]\n'
                 '[[routes]]\nmodel = "m"\ngroup = "g"\n', "upstream", "either upstream/models or groups/routes",
                 id="shorthand-and-groups"),
    pytest.param('[groups.g]\nendpoints = []\n[[routes]]\nmodel = "m"\ngroup = "g"\n', "groups.g.endpoints",
                 "length >= 1", id="a-group-without-endpoints"),
    pytest.param('[groups.g]\nendpoints = [{ url = "embedded:" }]\n[[routes]]\nmodel = "m"\ngroup = "g"\n',
                 "groups.g.endpoints[0].url", "only for the built-in demo", id="embedded-in-a-group"),
    pytest.param('unix = "run/ingress.sock"\n', "unix", "must be absolute", id="relative-socket-path"),
    pytest.param('[groups.g]\nendpoints = [{ url = "http://a:1" }]\n[[routes]]\nmodel = "m"\ngroup = "g"\n'
                 'count_tokens = "provider"\n', "routes[0].count_tokens", 'needs provider = "anthropic"',
                 id="a-provider-count-off-anthropic"),
    pytest.param('[groups.g]\nendpoints = [{ url = "http://a:1" }]\n[[routes]]\nmodel = "m"\ngroup = "g"\n'
                 'affinity_header = "x-session-id"\n', "routes[0].affinity_header", 'set balance = "cache_affine"',
                 id="an-affinity-header-on-a-p2c-group"),
    pytest.param('[groups.g]\nendpoints = [{ url = "http://a:1" }]\naffinity = { load_slack = 0.5 }\n'
                 '[[routes]]\nmodel = "m"\ngroup = "g"\n', "groups.g.affinity", 'balance = "cache_affine"',
                 id="affinity-settings-on-a-p2c-group"),
    pytest.param('[groups.g]\nendpoints = [{ url = "http://a:1" }]\nbalance = "least_request"\n'
                 '[[routes]]\nmodel = "m"\ngroup = "g"\n', "groups.g.balance", "Invalid enum value",
                 id="an-unknown-balance"),
    pytest.param('[groups.g]\nendpoints = [{ url = "http://a:1" }]\nbalance = "cache_affine"\n'
                 'affinity = { load_slack = -0.1 }\n[[routes]]\nmodel = "m"\ngroup = "g"\n',
                 "groups.g.affinity.load_slack", ">= 0", id="a-negative-load-slack"),
    pytest.param('[groups.g]\nendpoints = [{ url = "http://a:1" }]\nbalance = "cache_affine"\n'
                 'affinity = { load_allowance = -1 }\n[[routes]]\nmodel = "m"\ngroup = "g"\n',
                 "groups.g.affinity.load_allowance", ">= 0", id="a-negative-load-allowance"),
    pytest.param('[groups.g]\nendpoints = [{ url = "http://a:1" }]\nbalance = "cache_affine"\n'
                 'affinity = { prefix_spread = 1.5 }\n[[routes]]\nmodel = "m"\ngroup = "g"\n',
                 "groups.g.affinity.prefix_spread", "Expected `int`", id="a-fractional-prefix-spread"),
])
def test_whole_file_mistakes_name_the_key(text: str, key: str, detail: str) -> None:
    message = _error(text)

    assert message.startswith(f"ingress.toml: {key}: "), message
    assert detail in message


def test_a_cache_affine_group_and_its_routes_key_decode() -> None:
    text = ('[groups.g]\nendpoints = [{ url = "http://a:1" }, { url = "http://b:1" }]\nbalance = "cache_affine"\n'
            'affinity = { load_slack = 0.5, load_allowance = 1.5, prefix_spread = 3, max_entries = 4096, '
            'max_age = 60.0 }\n'
            '[groups.p]\nendpoints = [{ url = "http://c:1" }]\n'
            '[[routes]]\nmodel = "m"\ngroup = "p"\nfallback = "g"\naffinity_header = "x-session-id"\n')

    settings = parse_config(text, environ={})

    affine, p2c = settings.groups["g"], settings.groups["p"]
    assert (affine.balance, p2c.balance, p2c.affinity) == ("cache_affine", "p2c", None)
    assert affine.affinity is not None
    assert (affine.affinity.load_slack, affine.affinity.max_entries, affine.affinity.max_age) == (0.5, 4096, 60.0)
    assert (affine.affinity.load_allowance, affine.affinity.prefix_spread) == (1.5, 3)
    assert settings.routes[0].affinity_header == "x-session-id"  # its fallback is cache-affine


def test_load_config_names_a_file_it_cannot_read(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"

    with pytest.raises(ConfigError, match=rf"^{re.escape(str(missing))}: cannot read: "):
        load_config(missing)


def test_load_config_names_the_file_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "ingress.toml"
    path.write_text(_edit("max_queue = 16", "max_queue = -1"))

    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: groups\.primary\.max_queue: .* \(line 17\)$"):
        load_config(path, environ={})


# --- `ingress check-config` ---------------------------------------------------------------------


def _check_config(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ingress", "check-config", str(path)], capture_output=True,
                          text=True, timeout=30, cwd=ROOT, env={"PATH": "/usr/bin:/bin", **env})


def test_check_config_accepts_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "ingress.toml"
    path.write_text(EXAMPLE)

    done = _check_config(path, BACKUP_URL="http://10.0.0.99:9000")

    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"{path}: ok — 2 groups, 3 endpoints, 3 routes; models: 4o, gpt-4o, gpt-4o-latest\n")
    assert done.stderr == ""


@pytest.mark.parametrize(("old", "new", "expected"), [
    pytest.param("max_queue = 16", "max_queue = 16\nmax_qeue = 3",
                 r"groups\.primary\.max_qeue: Object contains unknown field `max_qeue` \(line 18\)", id="unknown-key"),
    pytest.param('group = "local"\nprovider', 'group = "nowhere"\nprovider',
                 r"routes\[1\]\.group: no group named 'nowhere'", id="missing-group"),
    pytest.param("${BACKUP_URL:-http://10.0.0.12:9000}", "${BACKUP_URL_UNSET}",
                 r"groups\.primary\.endpoints\[1\]\.url: environment variable BACKUP_URL_UNSET is not set",
                 id="missing-environment-variable"),
    pytest.param("[retry]", "[retry", r"line 7", id="toml-syntax"),
])
def test_check_config_refuses_a_bad_file(tmp_path: Path, old: str, new: str, expected: str) -> None:
    path = tmp_path / "ingress.toml"
    path.write_text(_edit(old, new))

    done = _check_config(path)

    assert done.returncode == 1
    assert done.stdout == ""
    assert re.fullmatch(rf"ingress: {re.escape(str(path))}: .*{expected}.*\n", done.stderr), done.stderr


def test_check_config_refuses_a_missing_file(tmp_path: Path) -> None:
    done = _check_config(tmp_path / "absent.toml")

    assert done.returncode == 1
    assert done.stderr.startswith(f"ingress: {tmp_path / 'absent.toml'}: cannot read: ")


# --- every setting is bounded where it is read: check-config accepts exactly what serve runs ------

MINIMAL = '[groups.g]\nendpoints = [{ url = "http://10.0.0.1:9000" }]\n[[routes]]\nmodel = "m"\ngroup = "g"\n'

BAD_VALUES = [  # a top-level line added to a minimal file, the key named, what is wrong
    pytest.param('log_level = "verbose"', "log_level", "Invalid enum value 'verbose'", id="unknown-log-level"),
    pytest.param('log_level = "INFO"', "log_level", "Invalid enum value 'INFO'", id="log-level-in-capitals"),
    pytest.param("max_body_bytes = 0", "max_body_bytes", ">= 1024", id="no-body-at-all"),
    pytest.param("max_body_bytes = -1", "max_body_bytes", ">= 1024", id="negative-body-limit"),
    pytest.param("max_body_bytes = 4294967296", "max_body_bytes", "<= 1073741824", id="body-limit-beyond-flatbuffers"),
    pytest.param("max_answer_bytes = 0", "max_answer_bytes", ">= 1024", id="no-answer-at-all"),
    pytest.param("max_answer_bytes = 4294967296", "max_answer_bytes", "<= 2147483647", id="answer-beyond-flatbuffers"),
    pytest.param("max_frame_bytes = -5", "max_frame_bytes", ">= 1024", id="negative-frame-limit"),
    pytest.param("max_frame_bytes = 8589934592", "max_frame_bytes", "<= 2147483647", id="frame-beyond-its-prefix"),
    pytest.param("gc_threshold0 = 0", "gc_threshold0", ">= 1", id="gc-threshold-0-turns-collection-off"),
    pytest.param("gc_threshold0 = -100", "gc_threshold0", ">= 1", id="negative-gc-threshold"),
    pytest.param("gc_threshold0 = 10000000000", "gc_threshold0", "<= 1000000", id="gc-threshold-beyond-a-c-int"),
    pytest.param("gc_threshold1 = 0", "gc_threshold1", ">= 1", id="no-young-collection-between-middle-ones"),
    pytest.param("start_pacing_ms = -1", "start_pacing_ms", ">= 0", id="negative-start-pacing"),
    pytest.param('host = ""', "host", "matching regex", id="empty-host"),
    pytest.param('host = "local host"', "host", "matching regex", id="host-with-a-space"),
    pytest.param("port = 65536", "port", "<= 65535", id="port-out-of-range"),
    pytest.param("workers = -1", "workers", ">= 0", id="negative-workers"),
    pytest.param("client = { header_timeout = 0 }", "client.header_timeout", "> 0.0", id="no-time-for-a-head"),
    pytest.param("client = { max_connections = 0 }", "client.max_connections", ">= 1", id="no-connection-at-all"),
]


@pytest.mark.parametrize(("line", "key", "detail"), BAD_VALUES)
def test_check_config_refuses_every_bad_value_naming_its_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, key: str, detail: str) -> None:
    path = tmp_path / "ingress.toml"
    path.write_text(f"{line}\n{MINIMAL}")

    code = main(["check-config", str(path)])

    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.startswith(f"ingress: {path}: {key}: "), err
    assert detail in err and err.endswith(" (line 1)\n"), err


@pytest.mark.parametrize(("old", "new", "key", "detail"), [
    pytest.param('path = "/ready"', 'path = "ready"', "groups.primary.health_check.path", "matching regex",
                 id="health-path-without-a-slash"),
    pytest.param('path = "/ready"', 'path = "/ready now"', "groups.primary.health_check.path", "matching regex",
                 id="health-path-that-breaks-the-request-line"),
])
def test_nested_bad_values_are_refused_naming_their_key(old: str, new: str, key: str, detail: str) -> None:
    message = _error(_edit(old, new))

    assert message.startswith(f"ingress.toml: {key}: "), message
    assert detail in message


def test_the_shorthand_upstream_is_checked_as_an_endpoint_url_is() -> None:
    message = _error('upstream = "ftp://10.0.0.1"\n')

    assert message.startswith("ingress.toml: upstream: Expected `str` matching regex"), message


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error", "critical"])
def test_every_log_level_check_config_accepts_can_be_served(level: str) -> None:
    settings = parse_config(f'log_level = "{level}"\n{MINIMAL}')
    try:
        configure(settings.log_level, io.StringIO(), cache=False)  # serve's first step with the setting
    finally:
        structlog.reset_defaults()


@pytest.mark.timeout(10)  # a value let through would start serving
@pytest.mark.parametrize(("flags", "key"), [
    (["--gc-threshold0", "0"], "gc_threshold0"),
    (["--gc-threshold1", "0"], "gc_threshold1"),
    (["--workers", "-1"], "workers"),
    (["--upstream", "ftp://10.0.0.1"], "upstream"),
    (["--port", "70000"], "port"),
])
def test_serve_refuses_a_bad_flag_as_check_config_would(flags: list[str], key: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--host", "127.0.0.1", "--port", "0", *flags])

    assert str(stopped.value).startswith(f"ingress: command line: {key}: "), stopped.value


def test_serve_refuses_an_unknown_log_level_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--log-level", "verbose"])

    assert stopped.value.code == 2  # argparse's usage error, before anything starts
    assert "invalid choice: 'verbose'" in capsys.readouterr().err


# --- credentials never sit in an endpoint URL (they would reach the Host header, logs and metrics) --

PASSWORD = "hunter2-pass-0451"


@pytest.mark.parametrize(("text", "environ", "key"), [
    pytest.param(_edit("http://10.0.0.11:9000", f"http://admin:{PASSWORD}@10.0.0.11:9000"), {},
                 "groups.primary.endpoints[0].url", id="user-and-password"),
    pytest.param(_edit("http://10.0.0.11:9000", f"https://{PASSWORD}@10.0.0.11"), {},
                 "groups.primary.endpoints[0].url", id="a-token-as-the-user"),
    pytest.param(EXAMPLE, {"BACKUP_URL": f"http://admin:{PASSWORD}@10.0.0.12:9000"},
                 "groups.primary.endpoints[1].url", id="from-the-environment"),
    pytest.param(f'upstream = "http://admin:{PASSWORD}@10.0.0.1:9000"\n', {}, "upstream", id="the-shorthand"),
])
def test_an_endpoint_url_with_credentials_is_refused_without_echoing_them(
        text: str, environ: dict[str, str], key: str) -> None:
    message = _error(text, environ)

    assert message.startswith(f"ingress.toml: {key}: "), message
    assert "credentials" in message
    assert PASSWORD not in message and "admin" not in message


def test_a_unix_socket_path_may_hold_an_at_sign() -> None:
    settings = parse_config(_edit("unix:/run/llm/model.sock", "unix:/run/llm/model@1.sock"), environ={})

    assert settings.groups["local"].endpoints[0].url == "unix:/run/llm/model@1.sock"


def test_check_config_and_serve_refuse_credentials_without_echoing_them(tmp_path: Path) -> None:
    path = tmp_path / "ingress.toml"
    path.write_text(EXAMPLE)
    secret_url = f"http://admin:{PASSWORD}@10.0.0.12:9000"

    checked = _check_config(path, BACKUP_URL=secret_url)
    served = subprocess.run([sys.executable, "-m", "ingress", "serve", "--port", "0", "--workers", "1",
                             "--upstream", secret_url],
                            capture_output=True, text=True, timeout=30, cwd=ROOT, env={"PATH": "/usr/bin:/bin"})

    assert checked.returncode == 1 and "groups.primary.endpoints[1].url: " in checked.stderr, checked.stderr
    assert served.returncode == 1 and "command line: upstream: " in served.stderr, served.stderr
    for done in (checked, served):
        assert PASSWORD not in done.stdout + done.stderr


# --- [tenancy] ----------------------------------------------------------------------------------

TENANCY = """\
[tenancy]
backend = "memory"
default_max_tokens = 2048

[tenancy.tenants.acme]
limits = { rpm = 600, tpm = 200_000, budget = { usd = 50.0, period = "month" } }
models = ["gpt-4o*"]

[[tenancy.keys]]
id = "3f9c2a7d1b6e"
tenant = "acme"
hash = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
models = ["gpt-4o-mini"]
limits = { rpm = 60, concurrency = 4 }

[tenancy.models."gpt-4o-mini"]
price = { input = 0.15, output = 0.6 }
default_max_tokens = 1024
"""


def test_a_tenancy_section_decodes() -> None:
    tenancy = parse_config(TENANCY).tenancy
    assert tenancy is not None and tenancy.tenants["acme"].limits.budget is not None
    assert tenancy.tenants["acme"].routes == ("*",)  # every route, unless narrowed (by name, or a glob)
    narrowed = parse_config(TENANCY.replace('models = ["gpt-4o*"]', 'routes = ["ingress-demo", "public-*"]')).tenancy
    assert narrowed is not None and narrowed.tenants["acme"].routes == ("ingress-demo", "public-*")
    assert tenancy.keys[0].limits.concurrency == 4 and tenancy.models["gpt-4o-mini"].price.output == 0.6


@pytest.mark.parametrize(("old", "new", "message"), [
    ('tenant = "acme"', 'tenant = "acne"', "tenancy.keys[0].tenant: no tenant named 'acne'"),
    ('backend = "memory"', 'backend = "redis"', "tenancy.redis: backend = \"redis\" needs redis"),
    ("limits = { rpm = 60, concurrency = 4 }", "limits = { rpm = 60, concurency = 4 }",
     "tenancy.keys[0].limits.concurency: Object contains unknown field `concurency` (line 14)"),
    ('hash = "sha256:0', 'hash = "md5:0', "tenancy.keys[0].hash: Expected `str` matching regex"),
    ("rpm = 600", "rpm = 0", "tenancy.tenants.acme.limits.rpm: Expected `int` >= 1"),
    ("output = 0.6", "output = -1", "tenancy.models.gpt-4o-mini.price.output: Expected `float` >= 0"),
    ('models = ["gpt-4o*"]', 'models = ["gpt-4o*"]\nguardrails = { patterns = [{ name = "ahead", regex = "a(?=b)" }] }',
     "tenancy.tenants.acme.guardrails.patterns[0].regex: RE2 cannot compile pattern 'ahead'"),
    ('backend = "memory"', 'backend = "memory"\nkeys_file = "/nonexistent/keys.toml"',
     "tenancy.keys_file: /nonexistent/keys.toml: cannot read"),
    ('models = ["gpt-4o*"]', 'models = ["gpt-4o*"]\nroutes = ["ingress-demo", "ingress-dem"]',
     "tenancy.tenants.acme.routes[1]: no route is named 'ingress-dem'"),
    ('backend = "memory"', 'backend = "memory"\nissuers = [{ issuer = "https://sso.example.com", audience = ["x"] }]',
     "tenancy.issuers[0]: set claims.tenant (the claim naming a token's tenant) or tenant"),
    ('backend = "memory"', 'backend = "memory"\nissuers = [{ issuer = "https://sso.example.com", audience = ["x"], '
                           'tenant = "initech" }]', "tenancy.issuers[0].tenant: no tenant named 'initech'"),
    ('backend = "memory"', 'backend = "memory"\nissuers = [{ issuer = "https://sso.example.com", audience = ["x"], '
                           'tenant = "acme", algorithms = ["HS256"] }]',
     "tenancy.issuers[0].algorithms[0]: Invalid enum value 'HS256'"),  # never HMAC (nor `none`)
    ('backend = "memory"', 'backend = "memory"\nissuers = [{ issuer = "https://a.example.com", audience = ["x"], '
                           'tenant = "acme" }, { issuer = "https://b.example.com", audience = ["x"], '
                           'tenant = "acme" }]',
     "tenancy.issuers[1].name: 'oidc' names two issuers"),
])
def test_tenancy_mistakes_are_named(old: str, new: str, message: str) -> None:
    assert old in TENANCY
    with pytest.raises(ConfigError) as error:
        parse_config(TENANCY.replace(old, new, 1))
    assert message in str(error.value)


def test_a_key_id_used_twice_is_refused(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text('[[keys]]\nid = "3f9c2a7d1b6e"\ntenant = "acme"\nhash = "sha256:' + "1" * 64 + '"\n')
    text = TENANCY.replace('backend = "memory"', f'backend = "memory"\nkeys_file = "{keys}"')
    with pytest.raises(ConfigError, match="the key id '3f9c2a7d1b6e' is used twice"):
        parse_config(text)


def test_keys_new_prints_the_key_once_and_an_entry_the_config_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    from ingress.tenancy.keys import hash_of

    assert main(["keys", "new", "--tenant", "acme", "--model", "gpt-4o*", "--name", "ci bot"]) == 0
    out = capsys.readouterr().out
    key = re.search(r"sk-ig-\S+", out)
    assert key is not None and out.count(key[0]) == 1  # shown once; the entry holds its hash
    settings = parse_config(TENANCY + "\n" + out)
    made = settings.tenancy.keys[-1] if settings.tenancy else None
    assert made is not None and made.hash == hash_of(key[0]) and made.models == ("gpt-4o*",)
    assert made.name == "ci bot"



def test_keys_new_admin_prints_an_admin_key_the_admin_section_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    from ingress.tenancy.keys import hash_of

    assert main(["keys", "new", "--admin", "viewer"]) == 0
    out = capsys.readouterr().out
    key = re.search(r"sk-ig-\S+", out)
    assert key is not None and out.count(key[0]) == 1
    settings = parse_config('workers = 1\n' + TENANCY + '\n[admin]\nlisten = "127.0.0.1:9090"\n' + out)
    assert settings.admin is not None
    assert [(k.hash, k.role) for k in settings.admin.keys] == [(hash_of(key[0]), "viewer")]
    with pytest.raises(ConfigError, match="is the public listener's"):
        parse_config('workers = 1\nport = 9090\n' + TENANCY + '\n[admin]\nlisten = "127.0.0.1:9090"\n' + out)

# --- fallback chains and splits ------------------------------------------------------------------

POLICY = ('[groups.openai]\nendpoints = [{ url = "http://a:1" }]\n'
          '[groups.anthropic]\nendpoints = [{ url = "http://b:1" }]\n'
          '[[routes]]\nmodel = "gpt"\ngroup = "openai"\nupstream_model = "gpt-4o"\n'
          'fallbacks = ["claude", "long"]\nfallback_on = ["rate_limited", "5xx", "context_length"]\n'
          'split = [{ route = "gpt", weight = 95 }, { route = "canary", weight = 5 }]\nsplit_by = "user"\n'
          '[[routes]]\nname = "claude"\ngroup = "anthropic"\nprovider = "anthropic"\n'
          'upstream_model = "claude-sonnet-4-5"\n'
          '[[routes]]\nname = "long"\ngroup = "openai"\nupstream_model = "gpt-4.1"\nmax_context = 1000000\n'
          '[[routes]]\nname = "canary"\ngroup = "openai"\nupstream_model = "gpt-5"\nfallbacks = ["gpt"]\n')


def test_a_chain_and_a_split_decode() -> None:
    gpt, claude, long, canary = parse_config(POLICY, environ={}).routes

    assert gpt.fallbacks == ["claude", "long"] and gpt.fallback_on == ("rate_limited", "5xx", "context_length")
    assert [(s.route, s.weight) for s in gpt.split] == [("gpt", 95), ("canary", 5)] and gpt.split_by == "user"
    assert (claude.name, claude.model, long.max_context, canary.fallbacks) == ("claude", None, 1_000_000, ["gpt"])


@pytest.mark.parametrize(("old", "new", "key", "detail"), [
    pytest.param('fallbacks = ["claude", "long"]', 'fallbacks = ["claude", "gemini"]', "routes[0].fallbacks[1]",
                 "no route named 'gemini'", id="an-unknown-fallback"),
    pytest.param('fallbacks = ["claude", "long"]', 'fallbacks = ["claude", "gpt"]', "routes[0].fallbacks[1]",
                 "cannot fall back on itself", id="a-fallback-on-itself"),
    pytest.param('fallbacks = ["claude", "long"]', 'fallbacks = ["claude", "claude"]', "routes[0].fallbacks[1]",
                 "listed twice", id="a-fallback-twice"),
    pytest.param('fallback_on = ["rate_limited", "5xx", "context_length"]', 'fallback_on = ["rate_limit"]',
                 "routes[0].fallback_on[0]", "Invalid enum value", id="an-unknown-class"),
    pytest.param('fallback_on = ["rate_limited", "5xx", "context_length"]', 'fallback_on = []',
                 "routes[0].fallback_on", "at least one class", id="no-class"),
    pytest.param('fallback_on = ["rate_limited", "5xx", "context_length"]', 'fallback_on = ["5xx", "5xx"]',
                 "routes[0].fallback_on", "listed twice", id="a-class-twice"),
    pytest.param('upstream_model = "gpt-4o"\n', 'upstream_model = "gpt-4o"\nfallback = "anthropic"\n',
                 "routes[0].fallback", "not both", id="a-group-fallback-and-fallbacks"),
    pytest.param('upstream_model = "gpt-5"\nfallbacks = ["gpt"]\n', 'upstream_model = "gpt-5"\nfallback_on = ["5xx"]\n',
                 "routes[3].fallback_on", "has none", id="fallback-on-without-fallbacks"),
    pytest.param('{ route = "canary", weight = 5 }', '{ route = "nightly", weight = 5 }', "routes[0].split[1].route",
                 "no route named 'nightly'", id="an-unknown-variant"),
    pytest.param('weight = 95 }, { route = "canary", weight = 5 }', 'weight = 0 }, { route = "canary", weight = 0 }',
                 "routes[0].split", "add up to 0", id="weights-of-nothing"),
    pytest.param('weight = 95 }, { route = "canary", weight = 5 }', 'weight = -1 }, { route = "canary", weight = 5 }',
                 "routes[0].split[0].weight", ">= 0", id="a-negative-weight"),
    pytest.param(', { route = "canary", weight = 5 }]', ']', "routes[0].split", "two variants or more",
                 id="a-split-of-one"),
    pytest.param('{ route = "canary", weight = 5 }', '{ route = "gpt", weight = 5 }', "routes[0].split[1].route",
                 "listed twice", id="a-variant-twice"),
    pytest.param('upstream_model = "gpt-5"\nfallbacks = ["gpt"]\n',
                 'upstream_model = "gpt-5"\nsplit = [{ route = "gpt", weight = 1 }, { route = "long", weight = 1 }]\n',
                 "routes[0].split[1].route", "must not split again", id="a-split-of-splits"),
    pytest.param('split_by = "user"', 'split_by = "header"', "routes[0].split_header", "needs the header's name",
                 id="split-by-header-without-its-name"),
    pytest.param('split_by = "user"', 'split_by = "cookie"', "routes[0].split_by", "Invalid enum value",
                 id="an-unknown-split-key"),
    pytest.param('name = "long"\ngroup = "openai"\nupstream_model = "gpt-4.1"\n', 'name = "long"\ngroup = "openai"\n',
                 "routes[2].upstream_model", "must name the model it sends", id="a-named-route-without-its-model"),
    pytest.param('name = "long"\n', 'name = "claude"\n', "routes[2].name", "already names routes[1]",
                 id="a-name-twice"),
])
def test_policy_mistakes_name_the_key(old: str, new: str, key: str, detail: str) -> None:
    assert POLICY.count(old) == 1, old
    message = _error(POLICY.replace(old, new))

    assert message.startswith(f"ingress.toml: {key}: "), message
    assert detail in message


# --- the response cache ----------------------------------------------------------------------------


def test_a_routes_cache_and_the_cache_section() -> None:
    text = _edit('glob = "*-mini"\n', 'glob = "*-mini"\ncache = { ttl = 60, scope = "key" }\n') + (
        "\n[cache]\nmemory_bytes = 1048576\ntimeout_ms = 20\n")
    settings = parse_config(text, environ={})
    route = next(r for r in settings.routes if r.glob == "*-mini")
    assert route.cache is not None
    assert (route.cache.ttl, route.cache.scope, route.cache.backend) == (60, "key", "memory")
    assert (settings.cache.memory_bytes, settings.cache.timeout_ms) == (1048576, 20)
    assert "cache.scope" in _error(_edit('glob = "*-mini"\n', 'glob = "*-mini"\ncache = { scope = "user" }\n'))
    assert "cache.ttl" in _error(_edit('glob = "*-mini"\n', 'glob = "*-mini"\ncache = { ttl = 0 }\n'))


def test_a_redis_cache_needs_the_tenancys_redis() -> None:
    message = _error(_edit('glob = "*-mini"\n', 'glob = "*-mini"\ncache = { backend = "redis" }\n'))
    assert "routes[2].cache.backend" in message and "[tenancy]" in message


def test_the_keys_that_seal_stored_responses_are_read_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """`[responses] seal_key_env` names a variable that must hold a key when the configuration is read."""
    text = f'{MINIMAL}\n[responses]\nseal_key_env = "INGRESS_TEST_SEAL"\n'
    monkeypatch.delenv("INGRESS_TEST_SEAL", raising=False)
    with pytest.raises(ConfigError, match=r"seal_key_env.*\$INGRESS_TEST_SEAL"):
        parse_config(text)
    monkeypatch.setenv("INGRESS_TEST_SEAL", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    assert parse_config(text).responses.seal_key_env == "INGRESS_TEST_SEAL"


def test_the_console_s_client_secret_is_read_from_a_variable_that_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    text = ('workers = 1\n' + TENANCY + '\n[admin]\nlisten = "127.0.0.1:9090"\n[admin.oidc]\n'
            'issuer = "https://sso.example.com"\naudience = ["ingress-admin"]\nadmin_values = ["ops"]\n'
            'redirect_uri = "https://admin.example.com/admin/v1/session/oidc/callback"\n'
            'client_secret_env = "INGRESS_TEST_CONSOLE_SECRET"\n')
    monkeypatch.delenv("INGRESS_TEST_CONSOLE_SECRET", raising=False)
    with pytest.raises(ConfigError, match=r"admin\.oidc\.client_secret_env: the environment variable "
                                          r"INGRESS_TEST_CONSOLE_SECRET is not set"):
        parse_config(text, environ={})
    monkeypatch.setenv("INGRESS_TEST_CONSOLE_SECRET", "s3cret")
    admin = parse_config(text, environ={}).admin
    assert admin is not None and admin.oidc is not None
    assert admin.oidc.client_secret_env == "INGRESS_TEST_CONSOLE_SECRET" and "s3cret" not in str(admin.oidc)


def test_an_overload_section_whose_limits_are_out_of_order_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"overload: the limits need min_limit <= initial_limit <= max_limit"):
        parse_config("[overload]\nmin_limit = 50\ninitial_limit = 10\n")
    assert parse_config("[overload]\nenabled = true\nmin_limit = 4\n").overload.min_limit == 4
