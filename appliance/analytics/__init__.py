"""Per-camera analytics: tracking, zones, line crossing, dwell, events and counts.

Modules, bottom up: :mod:`.config` (the ``analytics:`` section of a camera) and :mod:`.check` (checks that need
the camera's frame size and the model's class names), :mod:`.geometry` (polygons and segments, vectorized),
:mod:`.kalman` (a batched constant-velocity filter on boxes), :mod:`.tracker` (ByteTrack-class association),
:mod:`.zones` (zone membership and line sides per track), :mod:`.events` (the per-camera :class:`Analytics` that
turns a frame's detections into tracked detections, events and counts). Ground floor plus numpy/scipy only:
nothing here imports mqtt, ota, serving or supervisor.
"""
