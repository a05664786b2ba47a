"""Writes the readings into the address space on the server's loop: counts and events as soon as the feed wakes
it (within a frame of MQTT's), device and camera readings and the vision state every ``interval_s``. Only values
that changed are written, so a subscription sees each change once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asyncua import Server, ua
from asyncua.crypto.truststore import TrustStore
from asyncua.server.event_generator import EventGenerator

from appliance.opcua.feed import Feed, Taken
from appliance.opcua.machinevision import result_fields
from appliance.opcua.space import Space, write_state, write_values
from appliance.opcua.values import (
    HALTED,
    PREOPERATIONAL,
    CameraLayout,
    Value,
    camera_values,
    count_values,
    device_key,
    device_values,
    last_event_values,
    latest_per_camera,
    state_path,
    utc,
    vision_state,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Readings:
    """What the server reads of the appliance: ``summary`` is ``Appliance.health_summary``; ``phase`` says
    (frame path running, stopping); ``reset_line`` resets a line's counts, True when it exists."""

    summary: Callable[[], Mapping[str, Any]]
    phase: Callable[[], tuple[bool, bool]]
    reset_line: Callable[[str, str], bool]


class Updater:
    def __init__(self, server: Server, space: Space, cameras: Sequence[CameraLayout], readings: Readings,
                 boot: tuple[str, float]) -> None:
        self._server, self._space, self._readings, self._boot = server, space, readings, boot
        self._layouts = {c.camera_id: c for c in cameras}
        self._written: dict[str, Any] = {}
        self._events_total: dict[str, int] = {}
        self._state = PREOPERATIONAL  # as built
        self.halted_at: float | None = None  # monotonic time Halted was written; no other state after it
        self._results: list[EventGenerator] = []  # one for the VisionSystem's subscribers, one for the Server's
        # The served model as last sampled: a summary per event would cost more than the event itself.
        self._served: Mapping[str, Any] = {}

    async def init(self) -> None:
        boot_id, started_at = self._boot
        self._served = self._readings.summary().get("served") or {}
        await self._write({device_key("BootId"): (boot_id, ua.VariantType.String),
                           device_key("CountsSince"): (utc(started_at), ua.VariantType.DateTime)})
        for notifier in (self._space.vision.nodeid, self._server.nodes.server.nodeid):
            generator = await self._server.get_event_generator(self._space.result_type, notifier)
            generator.event.SourceNode = self._space.vision.nodeid
            # The appliance's fields are on its subtype, but the events say ResultReadyEventType: asyncua's OfType
            # filter compares the type exactly, and generic clients filter on the specification's type.
            generator.event.EventType = self._space.spec_result_type
            generator.event.SourceName = "VisionSystem"
            self._results.append(generator)

    async def _write(self, values: dict[str, Value]) -> None:
        await write_values(self._server, self._space, values, self._written)

    async def apply(self, taken: Taken) -> None:
        """Counts and events from the frame path: the variables first, then one ResultReady event each."""
        values: dict[str, Value] = {}
        for camera_id, (active, counts) in taken.counts.items():
            layout = self._layouts.get(camera_id)
            if layout is not None:
                values.update(count_values(layout, active, counts))
        for event in taken.events:
            self._events_total[event.camera_id] = self._events_total.get(event.camera_id, 0) + 1
        for camera_id, event in latest_per_camera(taken.events).items():
            values.update(last_event_values(event, self._events_total[camera_id]))
        await self._write(values)
        if taken.dropped:
            log.warning("OPC UA: %d result event(s) dropped (the server fell behind the frame path)", taken.dropped)
        for event in taken.events:
            await self._emit(event)

    async def _emit(self, event: Any) -> None:
        assert self._results, "init() first"
        fields = {**result_fields(event, self._space.device_id, self._boot[0], self._served),
                  "Camera": event.camera_id, "Result": event.event, "Seq": event.seq, "TrackId": event.track_id,
                  "ClassName": event.class_name, "Zone": event.zone or "", "Line": event.line or "",
                  "Direction": event.direction or "", "Severity": 100}
        for generator in self._results:
            for name, value in fields.items():
                setattr(generator.event, name, value)
            await generator.trigger(utc(event.capture_time), f"{event.camera_id}: {event.event}")

    async def sample(self) -> None:
        """Device and camera readings, and the vision state, from the health summary."""
        summary = self._readings.summary()
        self._served = summary.get("served") or {}
        values = device_values(summary)
        cameras = summary.get("cameras") or {}
        for camera_id in self._layouts:
            values.update(camera_values(camera_id, cameras.get(camera_id)))
        await self._write(values)
        started, stopping = self._readings.phase()
        await self._enter(vision_state(summary, started=started, stopping=stopping))

    async def _enter(self, state: str) -> None:
        if self.halted_at is not None:
            return
        for step in state_path(self._state, state):
            await write_state(self._server, self._space, step, before=self._state)
            self._state = step
        if state == HALTED:
            self.halted_at = time.monotonic()

    async def halt(self) -> None:
        """Halted now (the appliance is stopping): written once, never left."""
        await self._enter(HALTED)

    async def run(self, feed: Feed, stop: asyncio.Event, interval_s: float, trust: TrustStore) -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        feed.attach(lambda: _call_soon(loop, wake.set))
        try:
            await self._loop(feed, wake, stop, interval_s, trust)
        finally:
            feed.attach(None)

    async def _loop(self, feed: Feed, wake: asyncio.Event, stop: asyncio.Event, interval_s: float,
                    trust: TrustStore) -> None:
        trusted_mtime = _mtime(trust)
        next_sample = 0.0
        while not stop.is_set():
            waiter = asyncio.ensure_future(wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, timeout=max(0.0, next_sample - time.monotonic()),
                               return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            wake.clear()
            await self._safely(self.apply(feed.take()), "counts and events")
            if time.monotonic() >= next_sample:
                next_sample = time.monotonic() + interval_s
                await self._safely(self.sample(), "readings")
                if _mtime(trust) != trusted_mtime:  # a certificate was added or removed: no restart needed
                    trusted_mtime = _mtime(trust)
                    await trust.load()
                    log.info("OPC UA: reloaded the trusted client certificates")

    @staticmethod
    async def _safely(step: Awaitable[None], what: str) -> None:
        try:
            await step
        except Exception as exc:  # one update that failed must not end the server
            log.warning("OPC UA: %s not updated: %s", what, exc)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    loop.call_soon_threadsafe(callback)


def _mtime(trust: TrustStore) -> tuple[float, ...]:
    return tuple(path.stat().st_mtime if path.exists() else 0.0 for path in trust.trust_locations)
