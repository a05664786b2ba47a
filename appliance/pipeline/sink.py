"""A sink: one consumer of what the frame path produces (a frame's detections, its events, a camera's counts,
and, when it asks, the frame itself). Each method has a no-op default, so a sink says only what it takes.

Every sink is called on the completion thread, in each camera's frame order, one after the other in the order
they were registered; a sink hands slow work to its own thread. One that raises is logged and the next still
gets the result.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from appliance.events import Event
from appliance.mqtt.messages import DetectionsMessage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Counts:
    """A camera's counts as they are now (docs/analytics.md, "Counts")."""

    camera_id: str
    last_event_seq: int
    active_tracks: int
    counts: Mapping[str, Mapping[str, Mapping[str, int]]]
    changed: bool  # False: the same counts again on the appliance's tick (a retained topic's refresh)


@dataclass(frozen=True)
class Frame:
    """A frame a sink asked for, with its result: the pixels are a copy the ring no longer owns, shared by every
    sink that asked for this frame, so a sink reads them and draws on a copy of its own."""

    pixels: np.ndarray   # HxWx3
    pixel_format: str    # "bgr" or "rgb"
    message: DetectionsMessage  # with the track ids when the camera has analytics


class Sink(Protocol):
    """What a consumer of results implements (subclass it to inherit the no-op defaults)."""

    def on_detections(self, message: DetectionsMessage) -> None:
        """A frame's detections (with track ids when the camera has analytics)."""
        return None

    def on_events(self, events: Sequence[Event]) -> None:
        """That frame's events, right after its detections (never empty)."""
        return None

    def on_counts(self, counts: Counts) -> None:
        """A camera's counts: after a frame that changed them, after a reset, and again on the tick."""
        return None

    def wants_frame(self, camera_id: str) -> bool:
        """Asked once per frame at submit, before Triton reads it: True to get it in :meth:`on_frame`. Called
        for every frame of every camera: cheap, and the sink keeps its own rate. No sink asking: nothing copied."""
        return False

    def on_frame(self, camera_id: str, frame: Frame) -> None:
        """A frame this sink asked for, with its detections, before :meth:`on_detections` of that frame."""
        return None

    def stop(self) -> None:
        """After the last result: finish or drop what is queued. The appliance stops sinks in their order."""
        return None


class Sinks:
    """The registered sinks as one: each result to each sink in order."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = tuple(sinks)

    def __iter__(self) -> Iterator[Sink]:
        return iter(self.sinks)

    def wanting_frame(self, camera_id: str) -> tuple[Sink, ...]:
        """The sinks that want this frame of the camera; every sink is asked (each keeps its own rate)."""
        return tuple(sink for sink in self.sinks if sink.wants_frame(camera_id))

    def hand_frame(self, camera_id: str, frame: Frame, to: Sequence[Sink]) -> None:
        for sink in to:
            try:
                sink.on_frame(camera_id, frame)
            except Exception:  # one sink's failure must not cost the others the result
                _failed(sink, "a frame")

    def hand_detections(self, message: DetectionsMessage) -> None:
        for sink in self.sinks:
            try:
                sink.on_detections(message)
            except Exception:
                _failed(sink, "detections")

    def hand_events(self, events: Sequence[Event]) -> None:
        for sink in self.sinks:
            try:
                sink.on_events(events)
            except Exception:
                _failed(sink, "events")

    def hand_counts(self, counts: Counts) -> None:
        for sink in self.sinks:
            try:
                sink.on_counts(counts)
            except Exception:
                _failed(sink, "counts")

    def stop(self) -> None:
        for sink in self.sinks:
            try:
                sink.stop()
            except Exception:
                _failed(sink, "its stop")


def _failed(sink: Sink, what: str) -> None:
    log.exception("sink %s: handing on %s failed", type(sink).__name__, what)
