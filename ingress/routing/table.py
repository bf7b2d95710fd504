"""Model name → route: exact names and aliases, then the longest prefix, then globs in file order; and each
route's fallback chain and split, resolved once from the routes' names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import translate

from ingress.routing.chain import Link, chain_of, route_name
from ingress.settings import ErrorClass, Route


@dataclass(frozen=True, slots=True)
class Match:
    route: Route
    upstream_model: str  # the model name to send upstream
    chain: tuple[Link, ...] = ()  # the route first, then its fallbacks (ingress/routing/chain.py)
    fallback_on: frozenset[ErrorClass] = frozenset()
    variant: str | None = None  # the split's variant that took it (a route's name), when its route splits

    @property
    def links(self) -> tuple[Link, ...]:
        return self.chain or (Link(self.route, route_name(self.route), self.route.group, self.upstream_model),)


@dataclass(frozen=True, slots=True)
class _Policy:
    chain: tuple[Link, ...]
    fallback_on: frozenset[ErrorClass]
    shares: tuple[tuple[str, int], ...]  # the split's variants, by name, and their weights; () no split


class RouteTable:
    def __init__(self, routes: tuple[Route, ...]) -> None:
        self.routes = routes
        self._exact: dict[str, Route] = {}
        self._prefixes: list[Route] = []
        self._globs: list[tuple[re.Pattern[str], Route]] = []
        self._named: dict[str, Route] = {}
        for route in routes:
            self._named.setdefault(route_name(route), route)
            if route.model is not None:
                for name in (route.model, *route.aliases):
                    self._exact.setdefault(name, route)
            elif route.prefix is not None:
                self._prefixes.append(route)
            elif route.glob is not None:
                self._globs.append((re.compile(translate(route.glob)), route))
        self._prefixes.sort(key=lambda r: len(r.prefix or ""), reverse=True)
        self._policies: dict[int, _Policy] = {}
        for route in routes:
            chain, on = chain_of(route, self._named)
            self._policies[id(route)] = _Policy(chain, on, tuple((s.route, s.weight) for s in route.split))

    def match(self, model: str) -> Match | None:
        route = self._exact.get(model)
        if route is None:
            route = next((r for r in self._prefixes if model.startswith(r.prefix or "")), None)
        if route is None:
            route = next((r for pattern, r in self._globs if pattern.match(model)), None)
        if route is None:
            return None
        return self._match(route, model)

    def _match(self, route: Route, model: str, variant: str | None = None) -> Match:
        policy = self._policies[id(route)]
        return Match(route, route.upstream_model or route.model or model, policy.chain, policy.fallback_on, variant)

    def chain(self, route: Route) -> tuple[Link, ...]:
        return self._policies[id(route)].chain

    def shares(self, match: Match) -> tuple[tuple[str, int], ...]:
        """The variants of the match's route's split (() when it does not split)."""
        return self._policies[id(match.route)].shares if match.variant is None else ()

    def variant(self, match: Match, name: str, model: str) -> Match:
        """The match served by the split's variant `name` (the route itself, or another by its name)."""
        route = self._named[name]
        return self._match(route, model, name)

    def listed_models(self) -> list[str]:
        """What /v1/models lists: every exact name and alias (prefixes and globs name no model)."""
        return sorted(self._exact)
