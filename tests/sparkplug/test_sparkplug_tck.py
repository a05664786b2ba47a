"""The Sparkplug 3.0 specification's normative statements for an edge node, one test per ``tck-id`` (the ids of the
specification's text; the Eclipse Sparkplug TCK checks the same ones), each checked on one recorded life of a real
edge node process under a primary host (tests/support/sparkplugsession.py): payloads decoded by Eclipse Tahu's
JavaScript codec, MQTT flags from mosquitto's own log. The checks themselves: tests/sparkplug/sparkplug_tck_checks.py.
The statements that do not apply to this node, and why: docs/sparkplug.md, "Conformance"."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

from support.mosquitto import Mosquitto
from support.sparkplugsession import GROUP, NODE, STATE, Life, Script
from support.tahu import TahuCodec

from sparkplug_tck_checks import (aliases_alone_in_data, aliases_in_births, aliases_unique, assert_clean_311,
                                  bdseq_increments, births_lead, births_list_every_metric, births_then_each,
                                  births_wait_for_host, data_only_changes, datatypes_in_births_only,
                                  ddeath_for_a_lost_device, decodes, every_message_has_seq, every_metric_of_births,
                                  first_publish_is_nbirth_after_connack, has_timestamp, known_datatypes,
                                  metric_timestamps, mqtt_flags, nbirth_bdseq_matches_will, nbirth_seq_zero,
                                  ndeath_only_bdseq, ndeath_then_disconnect_on_host_offline, no_birth_before,
                                  null_values, one_connection_at_a_time, one_value_each, rebirth_metric,
                                  rebirth_on_request, reconnects_after_host_offline, seq_follows,
                                  stays_on_a_stale_offline, subscribed, topic_is, topic_levels, unique_names,
                                  will_payload, will_registered)

DEBUG_LOG = ["log_type debug", "log_type subscribe"]


@pytest.fixture(scope="module")
def tahu() -> Iterator[TahuCodec]:
    codec = TahuCodec()
    yield codec
    codec.close()


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory, tahu: TahuCodec) -> Iterator[Life]:
    workdir = tmp_path_factory.mktemp("sparkplug-tck")
    with Mosquitto(workdir / "broker", extra_config=DEBUG_LOG) as broker:
        yield Script(broker, workdir, tahu).run()


CHECKS: dict[str, Callable[[Life], None]] = {
    "case-sensitivity-metric-names": unique_names,
    "message-flow-device-birth-publish-dbirth-match-edge-node-topic": topic_is("DBIRTH", True),
    "message-flow-device-birth-publish-dbirth-payload": decodes("DBIRTH"),
    "message-flow-device-birth-publish-dbirth-qos": mqtt_flags("DBIRTH"),
    "message-flow-device-birth-publish-dbirth-retained": mqtt_flags("DBIRTH"),
    "message-flow-device-birth-publish-dbirth-topic": topic_is("DBIRTH", True),
    "message-flow-device-birth-publish-nbirth-wait": births_then_each,
    "message-flow-device-dcmd-subscribe": subscribed(f"spBv1.0/{GROUP}/DCMD/{NODE}/+"),
    "message-flow-edge-node-birth-publish-connect": first_publish_is_nbirth_after_connack,
    "message-flow-edge-node-birth-publish-nbirth-payload": decodes("NBIRTH"),
    "message-flow-edge-node-birth-publish-nbirth-payload-bdSeq": nbirth_bdseq_matches_will,
    "message-flow-edge-node-birth-publish-nbirth-payload-seq": nbirth_seq_zero,
    "message-flow-edge-node-birth-publish-nbirth-qos": mqtt_flags("NBIRTH"),
    "message-flow-edge-node-birth-publish-nbirth-retained": mqtt_flags("NBIRTH"),
    "message-flow-edge-node-birth-publish-nbirth-topic": topic_is("NBIRTH", False),
    "message-flow-edge-node-birth-publish-phid-offline": reconnects_after_host_offline,
    "message-flow-edge-node-birth-publish-phid-wait": births_wait_for_host,
    "message-flow-edge-node-birth-publish-phid-wait-id": births_wait_for_host,
    "message-flow-edge-node-birth-publish-phid-wait-online": no_birth_before("online"),
    "message-flow-edge-node-birth-publish-phid-wait-timestamp": births_wait_for_host,
    "message-flow-edge-node-birth-publish-will-message": will_registered,
    "message-flow-edge-node-birth-publish-will-message-payload": will_payload,
    "message-flow-edge-node-birth-publish-will-message-payload-bdSeq": will_payload,
    "message-flow-edge-node-birth-publish-will-message-qos": will_registered,
    "message-flow-edge-node-birth-publish-will-message-topic": will_registered,
    "message-flow-edge-node-birth-publish-will-message-will-retained": will_registered,
    "message-flow-edge-node-ncmd-subscribe": subscribed(f"spBv1.0/{GROUP}/NCMD/{NODE}"),
    "operational-behavior-data-commands-rebirth-action-1": rebirth_on_request,
    "operational-behavior-data-commands-rebirth-action-2": rebirth_on_request,
    "operational-behavior-data-commands-rebirth-action-3": rebirth_on_request,
    "operational-behavior-data-commands-rebirth-datatype": rebirth_metric,
    "operational-behavior-data-commands-rebirth-name": rebirth_metric,
    "operational-behavior-data-commands-rebirth-name-aliases": rebirth_metric,
    "operational-behavior-data-commands-rebirth-value": rebirth_metric,
    "operational-behavior-data-publish-dbirth": births_list_every_metric,
    "operational-behavior-data-publish-dbirth-values": null_values,
    "operational-behavior-data-publish-nbirth": births_list_every_metric,
    "operational-behavior-data-publish-nbirth-values": null_values,
    "operational-behavior-device-ddeath": ddeath_for_a_lost_device,
    "operational-behavior-edge-node-birth-sequence-wait": births_wait_for_host,
    "operational-behavior-edge-node-intentional-disconnect-ndeath": ndeath_then_disconnect_on_host_offline,
    "operational-behavior-edge-node-intentional-disconnect-packet": ndeath_then_disconnect_on_host_offline,
    "operational-behavior-edge-node-termination-host-offline": ndeath_then_disconnect_on_host_offline,
    "operational-behavior-edge-node-termination-host-offline-reconnect": reconnects_after_host_offline,
    "operational-behavior-edge-node-termination-host-offline-timestamp": stays_on_a_stale_offline,
    "operational-behavior-primary-application-state-with-multiple-servers-single-server": one_connection_at_a_time,
    "operational-behavior-primary-application-state-with-multiple-servers-state-subs": subscribed(STATE),
    "payloads-alias-birth-requirement": aliases_in_births,
    "payloads-alias-data-cmd-requirement": aliases_alone_in_data,
    "payloads-alias-uniqueness": aliases_unique,
    "payloads-dbirth-order": births_lead,
    "payloads-dbirth-qos": mqtt_flags("DBIRTH"),
    "payloads-dbirth-retain": mqtt_flags("DBIRTH"),
    "payloads-dbirth-seq": seq_follows("DBIRTH"),
    "payloads-dbirth-seq-inc": seq_follows("DBIRTH"),
    "payloads-dbirth-timestamp": has_timestamp("DBIRTH"),
    "payloads-ddata-order": births_lead,
    "payloads-ddata-qos": mqtt_flags("DDATA"),
    "payloads-ddata-retain": mqtt_flags("DDATA"),
    "payloads-ddata-seq": seq_follows("DDATA"),
    "payloads-ddata-seq-inc": seq_follows("DDATA"),
    "payloads-ddata-timestamp": has_timestamp("DDATA"),
    "message-flow-device-birth-publish-dbirth-payload-seq": seq_follows("DBIRTH"),
    "payloads-ddeath-seq": seq_follows("DDEATH"),
    "payloads-ddeath-seq-inc": seq_follows("DDEATH"),
    "payloads-ddeath-seq-number": seq_follows("DDEATH"),
    "payloads-ddeath-timestamp": has_timestamp("DDEATH"),
    "payloads-metric-datatype-not-req": datatypes_in_births_only,
    "payloads-metric-datatype-req": datatypes_in_births_only,
    "payloads-metric-datatype-value": known_datatypes,
    "payloads-metric-datatype-value-type": known_datatypes,
    "payloads-metric-timestamp-in-UTC": metric_timestamps,
    "payloads-name-birth-data-requirement": metric_timestamps,
    "payloads-name-requirement": aliases_in_births,
    "payloads-nbirth-bdseq": nbirth_bdseq_matches_will,
    "payloads-nbirth-bdseq-repeat": nbirth_bdseq_matches_will,
    "payloads-nbirth-qos": mqtt_flags("NBIRTH"),
    "payloads-nbirth-rebirth-req": rebirth_metric,
    "payloads-nbirth-retain": mqtt_flags("NBIRTH"),
    "payloads-nbirth-seq": nbirth_seq_zero,
    "payloads-nbirth-timestamp": has_timestamp("NBIRTH"),
    "payloads-ndata-order": births_lead,
    "payloads-ndata-qos": mqtt_flags("NDATA"),
    "payloads-ndata-retain": mqtt_flags("NDATA"),
    "payloads-ndata-seq": seq_follows("NDATA"),
    "payloads-ndata-seq-inc": seq_follows("NDATA"),
    "payloads-ndata-timestamp": has_timestamp("NDATA"),
    "payloads-ndeath-bdseq": nbirth_bdseq_matches_will,
    "payloads-ndeath-seq": ndeath_only_bdseq,
    "payloads-ndeath-will-message": will_registered,
    "payloads-ndeath-will-message-publisher": ndeath_then_disconnect_on_host_offline,
    "payloads-ndeath-will-message-publisher-disconnect-mqtt311": ndeath_then_disconnect_on_host_offline,
    "payloads-ndeath-will-message-qos": will_registered,
    "payloads-ndeath-will-message-retain": will_registered,
    "payloads-sequence-num-always-included": every_message_has_seq,
    "payloads-sequence-num-incrementing": seq_follows("NDATA"),
    "payloads-sequence-num-req-nbirth": nbirth_seq_zero,
    "payloads-timestamp-in-UTC": has_timestamp("NDATA"),
    "principles-birth-certificates-order": first_publish_is_nbirth_after_connack,
    "principles-persistence-clean-session-311": lambda life: assert_clean_311(life),
    "topics-dbirth-metric-reqs": births_list_every_metric,
    "topics-dbirth-metrics": every_metric_of_births,
    "topics-dbirth-mqtt": mqtt_flags("DBIRTH"),
    "topics-dbirth-seq": seq_follows("DBIRTH"),
    "topics-dbirth-timestamp": has_timestamp("DBIRTH"),
    "topics-dbirth-topic": topic_is("DBIRTH", True),
    "topics-ddata-mqtt": mqtt_flags("DDATA"),
    "topics-ddata-payload": data_only_changes("DDATA"),
    "topics-ddata-seq-num": seq_follows("DDATA"),
    "topics-ddata-timestamp": has_timestamp("DDATA"),
    "topics-ddata-topic": topic_is("DDATA", True),
    "topics-ddeath-mqtt": mqtt_flags("DDEATH"),
    "topics-ddeath-seq-num": seq_follows("DDEATH"),
    "topics-ddeath-topic": topic_is("DDEATH", True),
    "topics-nbirth-bdseq-included": nbirth_bdseq_matches_will,
    "topics-nbirth-bdseq-increment": bdseq_increments,
    "topics-nbirth-bdseq-matching": nbirth_bdseq_matches_will,
    "topics-nbirth-metric-reqs": births_list_every_metric,
    "topics-nbirth-metrics": every_metric_of_births,
    "topics-nbirth-mqtt": mqtt_flags("NBIRTH"),
    "topics-nbirth-rebirth-metric": rebirth_metric,
    "topics-nbirth-seq-num": nbirth_seq_zero,
    "topics-nbirth-timestamp": has_timestamp("NBIRTH"),
    "topics-nbirth-topic": topic_is("NBIRTH", False),
    "topics-ndata-mqtt": mqtt_flags("NDATA"),
    "topics-ndata-payload": data_only_changes("NDATA"),
    "topics-ndata-seq-num": seq_follows("NDATA"),
    "topics-ndata-timestamp": has_timestamp("NDATA"),
    "topics-ndata-topic": topic_is("NDATA", False),
    "topics-ndeath-payload": ndeath_only_bdseq,
    "topics-ndeath-seq": ndeath_only_bdseq,
    "topics-ndeath-topic": topic_is("NDEATH", False),
    "principles-rbe-recommended": data_only_changes("DDATA"),
    "operational-behavior-data-publish-nbirth-change": data_only_changes("NDATA"),
    "operational-behavior-data-publish-dbirth-change": data_only_changes("DDATA"),
    "operational-behavior-data-publish-nbirth-order": one_value_each,
    "operational-behavior-data-publish-dbirth-order": one_value_each,
    "topic-structure": topic_levels,
    "topic-structure-namespace-a": topic_levels,
    "topic-structure-namespace-device-id-associated-message-types": topic_levels,
    "topic-structure-namespace-device-id-non-associated-message-types": topic_levels,
}


@pytest.mark.parametrize("tck_id", sorted(CHECKS), ids=lambda i: f"tck-id-{i}")
def test_edge_node(tck_id: str, life: Life) -> None:
    CHECKS[tck_id](life)
