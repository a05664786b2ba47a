"""The frame path: per camera, capture -> inference -> results -> tracking/analytics -> sinks."""
