"""The appliance's sinks: each consumer of results that lives in its own package, seen through the one
:class:`~appliance.pipeline.sink.Sink` interface. The list they run in is ``supervisor.running.start_inference``'s."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from appliance.events import Event
from appliance.mqtt.messages import DetectionsMessage
from appliance.mqtt.publisher import MqttPublisher
from appliance.pipeline.sink import Counts, Frame, Sink

log = logging.getLogger(__name__)


class MqttSink(Sink):
    """The wire: detections, then the frame's events behind them in the spool; the counts retained."""

    def __init__(self, publisher: MqttPublisher) -> None:
        self._publisher = publisher

    def on_detections(self, message: DetectionsMessage) -> None:
        self._publisher.publish_detections(message)

    def on_events(self, events: Sequence[Event]) -> None:
        self._publisher.publish_events(events)

    def on_counts(self, counts: Counts) -> None:
        try:
            self._publisher.publish_counts(counts.camera_id, counts.last_event_seq, counts.active_tracks,
                                           counts.counts)
        except Exception as exc:  # stopping: the retained counts are republished on the next change
            log.debug("camera %s: counts not published: %s", counts.camera_id, exc)


class EventNotes(Protocol):
    """appliance.web.feed.EventFeed: the page's list of the newest events."""

    def note(self, events: Sequence[Event]) -> None: ...


class FrameTap(Protocol):
    """appliance.web.live.LiveFrames (the page's live picture), appliance.restream.tap.Restream (RTSP out)."""

    def wants(self, camera_id: str) -> bool: ...
    def offer(self, camera_id: str, pixels: np.ndarray, pixel_format: str, message: DetectionsMessage) -> None: ...


class PageSink(Sink):
    """The operator's page: every event into its event list; the live picture of a camera someone watches."""

    def __init__(self, feed: EventNotes, live: FrameTap) -> None:
        self._feed, self._live = feed, live

    def on_events(self, events: Sequence[Event]) -> None:
        self._feed.note(events)

    def wants_frame(self, camera_id: str) -> bool:
        return self._live.wants(camera_id)

    def on_frame(self, camera_id: str, frame: Frame) -> None:
        self._live.offer(camera_id, frame.pixels, frame.pixel_format, frame.message)


class Stoppable(FrameTap, Protocol):
    def stop(self) -> None: ...


class RestreamSink(Sink):
    """The RTSP restream: the frames of a camera a client watches, drawn on for ``/<camera>/annotated``."""

    def __init__(self, restream: Stoppable) -> None:
        self._restream = restream

    def wants_frame(self, camera_id: str) -> bool:
        return self._restream.wants(camera_id)

    def on_frame(self, camera_id: str, frame: Frame) -> None:
        self._restream.offer(camera_id, frame.pixels, frame.pixel_format, frame.message)

    def stop(self) -> None:
        self._restream.stop()


class EventMirror(Protocol):
    """appliance.opcua.feed.Feed: the OPC UA server's hand-over (it never waits on the server)."""

    def publish_events(self, events: Sequence[Event]) -> int: ...
    def publish_counts(self, camera_id: str, last_event_seq: int, active_tracks: int,
                       counts: Mapping[str, Mapping[str, Mapping[str, int]]]) -> None: ...


class OpcUaSink(Sink):
    """The OPC UA server's events and counts (changed ones: its variables keep their values between changes)."""

    def __init__(self, feed: EventMirror) -> None:
        self._feed = feed

    def on_events(self, events: Sequence[Event]) -> None:
        self._feed.publish_events(events)

    def on_counts(self, counts: Counts) -> None:
        if counts.changed:
            self._feed.publish_counts(counts.camera_id, counts.last_event_seq, counts.active_tracks, counts.counts)
