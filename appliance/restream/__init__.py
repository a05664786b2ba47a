"""The restream: each camera's picture, plain and annotated, as H.264 over RTSP (docs/restream.md)."""
