"""``mqtt.sparkplug``: the optional Sparkplug B edge node beside the JSON topics (docs/sparkplug.md).

Here, not in ``appliance.sparkplug``, because ``MqttConfig`` holds it and the config stays on the mqtt floor; the
edge node itself (``appliance.sparkplug``) stands above it.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from appliance.config.base import StrictModel

# One Sparkplug topic level: the spec forbids '/', '+' and '#'; we also keep out spaces and other characters that
# need escaping in a SCADA tag path.
SPARKPLUG_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class SparkplugConfig(StrictModel):
    """An edge node ``spBv1.0/<group_id>/.../<edge_node_id>`` with one Sparkplug device per camera. It has its own
    MQTT connection to the broker of ``mqtt`` (same host, port, TLS and credentials), since its NDEATH must be the
    last will of the connection that sent its NBIRTH."""

    group_id: str = Field(..., pattern=SPARKPLUG_ID_PATTERN, description="Sparkplug group (e.g. the plant or line)")
    edge_node_id: Optional[str] = Field(None, pattern=SPARKPLUG_ID_PATTERN,
                                        description="this edge node's id; None: mqtt.device_id")
    primary_host_id: Optional[str] = Field(None, pattern=SPARKPLUG_ID_PATTERN,
                                           description="the primary host application's id: births only while its "
                                           "STATE (spBv1.0/STATE/<id>) says online; None: births at once")
    interval_s: float = Field(1.0, ge=0.01, le=3600, description="how often the readings are sampled; only "
                              "metrics that changed are published (report by exception)")

    def node_id(self, device_id: str) -> str:
        return self.edge_node_id or device_id
