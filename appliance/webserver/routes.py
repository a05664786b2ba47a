"""What the server serves, grouped by kind of route; each kind has its own limits (appliance.webserver.limits).

- ``health``: the probes and metrics; never capped, so no client of the page can delay them.
- ``requests``: pages, JSON, pictures, edits: short; capped per address and in all, a body must arrive whole in
  time and be small.
- ``streams``: responses that last (an event stream, a video, a clip download): their own cap, never cut by the
  deadline meant for a request's body.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, MutableMapping

from starlette.routing import BaseRoute, Match

Kind = Literal["health", "request", "stream"]


@dataclass(frozen=True)
class Routes:
    health: tuple[BaseRoute, ...] = ()
    requests: tuple[BaseRoute, ...] = ()
    streams: tuple[BaseRoute, ...] = ()

    @classmethod
    def of(cls, *, health: Iterable[BaseRoute] = (), requests: Iterable[BaseRoute] = (),
           streams: Iterable[BaseRoute] = ()) -> Routes:
        return cls(tuple(health), tuple(requests), tuple(streams))

    def __add__(self, other: Routes) -> Routes:
        return Routes(self.health + other.health, self.requests + other.requests, self.streams + other.streams)

    def all(self) -> list[BaseRoute]:
        """Every route, in the order Starlette tries them: health first, then streams, then requests."""
        return [*self.health, *self.streams, *self.requests]

    def kind(self, scope: MutableMapping[str, Any]) -> Kind:
        """The kind of the route that serves ``scope`` (an HTTP request's); a path no route knows is a request."""
        if any(route.matches(scope)[0] is not Match.NONE for route in self.health):
            return "health"
        if any(route.matches(scope)[0] is not Match.NONE for route in self.streams):
            return "stream"
        return "request"
