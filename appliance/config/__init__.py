"""Configuration models. Every section inherits :class:`StrictModel`."""

from appliance.config.base import StrictModel

__all__ = ["StrictModel"]
