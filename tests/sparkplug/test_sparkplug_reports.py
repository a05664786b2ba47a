"""The edge node's decisions without a broker (appliance.sparkplug.reports): births, report by exception, deaths,
seq on every message but NDEATH. Decoded with the spec's schema (tests/support/sparkplug_b.py)."""

from __future__ import annotations

from support.sparkplug_b import announced, metrics_of, parse

from appliance.sparkplug.payload import DataType
from appliance.sparkplug.reports import NodeReports, Outgoing, Readings, SparkplugTopics, death_payload
from appliance.sparkplug.sequence import SeqCounter

TOPICS = SparkplugTopics("plant1", "edge7")
NODE = {"Model/Version": (DataType.String, "base"), "Inference/Latency p50 ms": (DataType.Double, None)}


def cam(fps: float, state: str = "streaming") -> dict[str, tuple[DataType, object]]:
    return {"State": (DataType.String, state), "Capture/FPS": (DataType.Double, fps)}


ALIASES: dict[int, tuple[str, int]] = {}  # what the births decoded so far announced (one NodeReports per test)


def decoded(out: list[Outgoing]) -> list[tuple[str, int | None, dict[str, object]]]:
    """(topic, seq, metrics), DATA metrics named from the aliases the births decoded here announced."""
    result = []
    for o in out:
        p = parse(o.payload)
        if "BIRTH" in o.topic:
            ALIASES.update(announced(p))
        result.append((o.topic, p.seq if p.HasField("seq") else None, metrics_of(p, ALIASES)))
    return result


def reports(seq: SeqCounter | None = None) -> NodeReports:
    ALIASES.clear()
    return NodeReports(TOPICS, bd_seq=5, clock_ms=lambda: 1_000, seq=seq)


def test_births_are_nbirth_with_seq_0_and_bdseq_then_every_dbirth() -> None:
    out = decoded(reports(SeqCounter(start=77)).births(Readings(NODE, {"cam1": cam(10.0), "cam2": cam(5.0)})))
    assert out == [
        ("spBv1.0/plant1/NBIRTH/edge7", 0, {"bdSeq": 5, "Node Control/Rebirth": False, "Model/Version": "base",
                                            "Inference/Latency p50 ms": None}),
        ("spBv1.0/plant1/DBIRTH/edge7/cam1", 1, {"State": "streaming", "Capture/FPS": 10.0}),
        ("spBv1.0/plant1/DBIRTH/edge7/cam2", 2, {"State": "streaming", "Capture/FPS": 5.0}),
    ]


def test_only_changed_metrics_are_sent_and_nothing_when_nothing_changed() -> None:
    r = reports()
    decoded(r.births(Readings(NODE, {"cam1": cam(10.0)})))
    assert r.changes(Readings(NODE, {"cam1": cam(10.0)})) == []
    node = {**NODE, "Inference/Latency p50 ms": (DataType.Double, 12.5)}
    out = decoded(r.changes(Readings(node, {"cam1": cam(9.5)})))
    assert out == [("spBv1.0/plant1/NDATA/edge7", 2, {"Inference/Latency p50 ms": 12.5}),
                   ("spBv1.0/plant1/DDATA/edge7/cam1", 3, {"Capture/FPS": 9.5})]


def test_a_device_that_goes_gets_ddeath_and_is_born_again_when_back() -> None:
    r = reports()
    r.births(Readings(NODE, {"cam1": cam(10.0), "cam2": cam(5.0)}))
    assert decoded(r.changes(Readings(NODE, {"cam1": cam(10.0)}))) == [
        ("spBv1.0/plant1/DDEATH/edge7/cam2", 3, {})]
    assert decoded(r.changes(Readings(NODE, {"cam1": cam(10.0), "cam2": cam(4.0)}))) == [
        ("spBv1.0/plant1/DBIRTH/edge7/cam2", 4, {"State": "streaming", "Capture/FPS": 4.0})]


def test_a_new_device_metric_rebirths_that_device_and_a_new_node_metric_the_whole_node() -> None:
    r = reports()
    r.births(Readings(NODE, {"cam1": cam(10.0)}))
    grown = {**cam(10.0), "Analytics/Zones/door/Current": (DataType.Int64, 1)}
    assert [t for t, _, _ in decoded(r.changes(Readings(NODE, {"cam1": grown})))] == [
        "spBv1.0/plant1/DBIRTH/edge7/cam1"]
    node = {**NODE, "Triton/Ready": (DataType.Boolean, True)}
    out = decoded(r.changes(Readings(node, {"cam1": grown})))
    assert [(t, s) for t, s, _ in out] == [("spBv1.0/plant1/NBIRTH/edge7", 0), ("spBv1.0/plant1/DBIRTH/edge7/cam1", 1)]


def test_seq_wraps_from_255_to_0_across_data_messages() -> None:
    r = reports()
    decoded(r.births(Readings(NODE, {"cam1": cam(0.0)})))  # seq 0 and 1
    seqs = [decoded(r.changes(Readings(NODE, {"cam1": cam(float(i))})))[0][1] for i in range(1, 300)]
    assert seqs[:3] == [2, 3, 4]
    assert seqs[252:256] == [254, 255, 0, 1]
    assert seqs == [(i + 2) % 256 for i in range(299)]


def test_ndeath_carries_bdseq_and_no_seq() -> None:
    p = parse(death_payload(200, 1_234))
    assert not p.HasField("seq") and p.timestamp == 1_234
    assert metrics_of(p) == {"bdSeq": 200} and p.metrics[0].datatype == 4  # Int64, as the spec says
