"""Edge vision appliance: cameras -> embedded Triton -> MQTT."""

__version__ = "0.1.0"
