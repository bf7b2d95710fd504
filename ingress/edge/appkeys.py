"""Every typed key the edge's aiohttp application and requests carry, in one place."""

from __future__ import annotations

from aiohttp import web

from ingress.edge.drain import Drain
from ingress.edge.overload import Gate, Place
from ingress.edge.pacing import StartPacer
from ingress.exchange import Exchange
from ingress.pipeline import Gateway
from ingress.settings import Settings
from ingress.tasks import BackgroundTasks
from ingress.tenancy.ledger import Ledger

SETTINGS = web.AppKey("settings", Settings)
TASKS = web.AppKey("tasks", BackgroundTasks)
GATEWAY = web.AppKey("gateway", Gateway)  # built at start-up, in the app's cleanup context
DRAIN = web.AppKey("drain", Drain)
PACER = web.AppKey("pacer", StartPacer)  # absent: starts are not paced
LEDGER = web.AppKey("ledger", Ledger)  # absent: no spend ledger ([admin.ledger])
GATE = web.AppKey("gate", Gate)  # absent: no in-flight limit ([overload] not enabled)
STARTED = web.AppKey("started", int)  # the Unix time the app was made: the models' `created`
EXCHANGE = web.RequestKey("exchange", Exchange)
PLACE = web.RequestKey("place", Place)  # the request's place under the in-flight limit, until given back
