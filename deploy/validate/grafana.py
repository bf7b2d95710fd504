"""grafana: the dashboard's queries read only metrics the edge exports, and every metric is on a panel."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from . import common
from .common import Result, rel

# The metrics the edge exports, as exposed (counters with _total), and their types.
METRICS: dict[str, str] = {
    "ingress_requests_total": "counter",
    "ingress_request_duration_seconds": "histogram",
    "ingress_overhead_seconds": "histogram",
    "ingress_upstream_duration_seconds": "histogram",
    "ingress_time_to_first_token_seconds": "histogram",
    "ingress_inter_chunk_seconds": "histogram",
    "ingress_in_flight": "gauge",
    "ingress_tokens_total": "counter",
    "ingress_upstream_endpoint_healthy": "gauge",
    "ingress_affinity_choices_total": "counter",
    "ingress_affinity_matched_blocks": "histogram",
    "ingress_upstream_tokens_total": "counter",
    "ingress_retries_total": "counter",
    "ingress_route_attempts_total": "counter",
    "ingress_split_requests_total": "counter",
    "ingress_rejections_total": "counter",
    "ingress_hints_not_sent_total": "counter",
    "ingress_response_cache_lookups_total": "counter",
    "ingress_response_cache_stores_total": "counter",
    "ingress_cache_coalesced_total": "counter",
    "ingress_response_cache_evictions_total": "counter",
    "ingress_response_cache_errors_total": "counter",
    "ingress_responses_stored_total": "counter",
    "ingress_response_store_errors_total": "counter",
    "ingress_response_store_evictions_total": "counter",
    "ingress_conversations_created_total": "counter",
    "ingress_conversation_items_stored_total": "counter",
    "ingress_responses_resumed_total": "counter",
    "ingress_trace_spans_exported_total": "counter",
    "ingress_trace_spans_dropped_total": "counter",
    "ingress_admissions_total": "counter",
    "ingress_limited_total": "counter",
    "ingress_prompt_tokens_counted_total": "counter",
    "ingress_tokens_reserved_total": "counter",
    "ingress_tokens_settled_total": "counter",
    "ingress_tokens_refunded_total": "counter",
    "ingress_leases_expired_total": "counter",
    "ingress_limit_store_seconds": "histogram",
    "ingress_limit_store_errors_total": "counter",
    "ingress_ledger_errors_total": "counter",
    "ingress_limit_breaker_open": "gauge",
    "ingress_gc_collections_total": "counter",
    "ingress_gc_pause_seconds": "histogram",
    "ingress_concurrency_limit": "gauge",
    "ingress_concurrency_waiting": "gauge",
    "ingress_concurrency_wait_seconds": "histogram",
    "ingress_concurrency_refused_total": "counter",
    "ingress_event_loop_tasks": "gauge",
    "ingress_build_info": "gauge",
}
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def exported_metrics() -> dict[str, str] | None:
    """The metrics ingress/metrics/ defines, as exposed; None when it cannot be imported."""
    try:
        import prometheus_client

        from ingress import metrics as module
    except ImportError:
        return None
    exposed: dict[str, str] = {}
    for value in vars(module).values():
        # prometheus-client's metrics, and the histograms, our own collector (ingress/metrics/histogram.py)
        if isinstance(value, prometheus_client.metrics.MetricWrapperBase | module.BulkHistogram):
            for family in value.describe():
                suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
                exposed[family.name + suffix] = {"info": "gauge"}.get(family.type, family.type)
    return exposed


PROMQL_WORDS = {"sum", "min", "max", "avg", "count", "by", "without", "rate", "irate", "increase",
                "histogram_quantile", "clamp_min", "clamp_max", "label_values", "topk", "bottomk", "on",
                "ignoring", "group_left", "group_right", "le", "and", "or", "unless", "offset", "abs",
                "time", "vector", "scalar", "delta", "deriv", "avg_over_time", "max_over_time"}


# What every selector of an edge metric on the dashboard carries: the job and instance variables.
DASHBOARD_SELECTORS = ('job=~"$job"', 'instance=~"$instance"')


def promql_names(expr: str) -> Iterator[str]:
    """The metric names an expression reads (PromQL's own words, labels, ranges and numbers left out)."""
    bare = re.sub(r'"[^"]*"', '""', expr)  # label values are not metric names,
    bare = re.sub(r"\{[^}]*\}", "{}", bare)  # nor are label matchers,
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)  # grouping,
    bare = re.sub(r"\[[^\]]*\]", "[]", bare)  # ranges,
    bare = re.sub(r"(?<![\w.])\d+(\.\d+)?([eE][-+]?\d+)?", "0", bare)  # and numbers
    bare = re.sub(r",\s*\w+\s*\)\s*$", ")", bare) if bare.startswith("label_values(") else bare  # the label
    for name in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare):
        if name not in PROMQL_WORDS and not re.fullmatch(r"\d.*", name):
            yield name


def queried_metric(name: str) -> tuple[str | None, str | None]:
    """(the METRICS entry a series name reads, or None; an error, or None)."""
    base = next((name[: -len(s)] for s in HISTOGRAM_SERIES
                 if name.endswith(s) and METRICS.get(name[: -len(s)]) == "histogram"), None)
    if base is not None:
        return base, None
    if METRICS.get(name) == "histogram":
        return None, f"histogram {name} queried without a _bucket/_sum/_count series"
    if name in METRICS:
        return name, None
    return None, f"{name} is not a metric the edge exports"


def check_grafana() -> Result:
    result = Result("grafana")
    path = common.DEPLOY / "grafana" / "ingress-dashboard.json"
    try:
        dashboard = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        result.errors.append(f"{rel(path)}: not JSON: {exc}")
        return result
    for key in ("title", "uid", "panels", "templating", "schemaVersion"):
        if key not in dashboard:
            result.errors.append(f"{rel(path)}: no {key!r}")
    variables = {v.get("name"): v for v in (dashboard.get("templating") or {}).get("list") or []}
    ds = variables.get("datasource") or {}
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        result.errors.append(f"{rel(path)}: no `datasource` template variable of type datasource (prometheus)")
    for name, variable in variables.items():
        if variable.get("type") != "query":
            continue
        given = variable.get("query")
        query = str((given.get("query") if isinstance(given, dict) else given) or "")
        if (variable.get("datasource") or {}).get("uid") != "${datasource}":
            result.errors.append(f"{rel(path)}: variable ${name}: datasource is not ${{datasource}}")
        for var in re.findall(r"\$(\w+)", query):
            if var not in variables:
                result.errors.append(f"{rel(path)}: variable ${name}: unknown variable ${var}")
        for series in promql_names(query):
            if queried_metric(series)[1] is not None:
                result.errors.append(f"{rel(path)}: variable ${name}: {series} is not a metric the edge exports")
    panels = list(dashboard.get("panels") or [])
    for panel in list(panels):
        panels += panel.get("panels") or []  # collapsed rows hold their panels
    ids = [p.get("id") for p in panels]
    if len(ids) != len(set(ids)):
        result.errors.append(f"{rel(path)}: panel ids are not unique")
    used: set[str] = set()
    exprs = 0
    for panel in panels:
        if panel.get("type") == "row":
            continue
        title = panel.get("title")
        grid = panel.get("gridPos") or {}
        if not grid or grid.get("x", 0) + grid.get("w", 0) > 24:
            result.errors.append(f"{rel(path)}: panel {title!r}: gridPos missing or wider than 24")
        targets = panel.get("targets") or []
        if not targets:
            result.errors.append(f"{rel(path)}: panel {title!r} has no query")
        for target in [panel, *targets]:
            uid = (target.get("datasource") or {}).get("uid")
            if uid != "${datasource}":
                result.errors.append(f"{rel(path)}: panel {title!r}: datasource {uid!r} is not ${{datasource}}")
        for target in targets:
            expr = target.get("expr", "")
            exprs += 1
            if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
                result.errors.append(f"{rel(path)}: panel {title!r}: unbalanced brackets in {expr!r}")
            for var in re.findall(r"\$(\w+)", expr):
                if var not in variables and not var.startswith("__"):
                    result.errors.append(f"{rel(path)}: panel {title!r}: unknown variable ${var}")
            blanked = re.sub(r'"[^"]*"', lambda m: '"' + " " * (len(m[0]) - 2) + '"', expr)  # same offsets
            for selected in re.finditer(r"\b(ingress_\w+)\s*(\{[^}]*\})?", blanked):
                matchers = expr[selected.start(2):selected.end(2)] if selected.group(2) else ""
                for wanted in DASHBOARD_SELECTORS:
                    if wanted not in matchers:
                        result.errors.append(f"{rel(path)}: panel {title!r}: {selected.group(1)} is not selected "
                                             f"by {wanted}")
            for name in promql_names(expr):
                metric, error = queried_metric(name)
                if error is not None:
                    result.errors.append(f"{rel(path)}: panel {title!r}: {error}")
                elif metric is not None:
                    used.add(metric)
    for name in sorted(set(METRICS) - used):
        result.errors.append(f"{rel(path)}: metric {name} is on no panel")
    result.checked.append(f"{len(panels)} panels, {exprs} queries, {len(used)}/{len(METRICS)} metrics, "
                          f"{len(variables)} variables")
    exported = exported_metrics()
    if exported is None:
        result.checked.append("ingress/metrics/ not importable: metric names checked against METRICS only")
    else:
        for name in sorted(set(METRICS) - set(exported)):
            result.errors.append(f"ingress/metrics/ does not export {name}")
        for name in sorted(set(exported) - set(METRICS)):
            result.errors.append(f"ingress/metrics/ exports {name}, which METRICS does not list: add it, and "
                                 f"a panel for it")
        for name in sorted(set(METRICS) & set(exported)):
            if exported[name] != METRICS[name]:
                result.errors.append(f"ingress/metrics/ exports {name} as a {exported[name]}, not a {METRICS[name]}")
        result.checked.append("METRICS agrees with ingress/metrics/")
    return result
