"""Model name → route: exact names and aliases, then the longest prefix, then globs in file order."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import translate

from ingress.settings import Route


@dataclass(frozen=True)
class Match:
    route: Route
    upstream_model: str  # the model name to send upstream


class RouteTable:
    def __init__(self, routes: tuple[Route, ...]) -> None:
        self._exact: dict[str, Route] = {}
        self._prefixes: list[Route] = []
        self._globs: list[tuple[re.Pattern[str], Route]] = []
        for route in routes:
            if route.model is not None:
                for name in (route.model, *route.aliases):
                    self._exact.setdefault(name, route)
            elif route.prefix is not None:
                self._prefixes.append(route)
            elif route.glob is not None:
                self._globs.append((re.compile(translate(route.glob)), route))
        self._prefixes.sort(key=lambda r: len(r.prefix or ""), reverse=True)

    def match(self, model: str) -> Match | None:
        route = self._exact.get(model)
        if route is None:
            route = next((r for r in self._prefixes if model.startswith(r.prefix or "")), None)
        if route is None:
            route = next((r for pattern, r in self._globs if pattern.match(model)), None)
        if route is None:
            return None
        return Match(route, route.upstream_model or route.model or model)

    def listed_models(self) -> list[str]:
        """What /v1/models lists: every exact name and alias (prefixes and globs name no model)."""
        return sorted(self._exact)
