"""The operator's page: the live picture with detections, zones and lines, the events, and the zone editor."""
