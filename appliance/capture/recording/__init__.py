"""Recording: a camera's own compressed packets kept as short MP4 segments (no re-encode), and event clips cut
from them. What runs where: docs/capture.md, "Recording and event clips"."""
