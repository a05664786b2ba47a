"""The checks of tests/sparkplug/test_sparkplug_tck.py: one function (or function factory) per kind of normative
statement, each given the recorded life of a real edge node under a primary host (tests/support/sparkplugsession.py)
and failing with what it found."""

from __future__ import annotations

import time
from typing import Any, Callable

from support.sparkplug_b import DATATYPES, parse
from support.sparkplugsession import CLIENT_ID, GROUP, NODE, Life, Seen

DATA = ("NDATA", "DDATA")


# -- what the checks look at ---------------------------------------------------------------------------------------

def connections(life: Life) -> list[list[Seen]]:
    """The node's messages per MQTT connection: each ends with its NDEATH."""
    out: list[list[Seen]] = [[]]
    for m in life.messages:
        out[-1].append(m)
        if m.kind == "NDEATH":
            out.append([])
    return [c for c in out if c]


def sessions(life: Life) -> list[list[Seen]]:
    """Runs from an NBIRTH to the next NBIRTH or NDEATH (excluded): the stretches one seq counts through."""
    out: list[list[Seen]] = []
    for m in life.messages:
        if m.kind == "NBIRTH":
            out.append([])
        if m.kind != "NDEATH" and out:
            out[-1].append(m)
    return out


def births_then(life: Life, kind: str) -> None:
    assert life.of(kind), f"no {kind} recorded"


def metric_docs(life: Life, *kinds: str) -> list[dict[str, Any]]:
    return [metric for m in life.messages if m.kind in kinds for metric in m.doc.get("metrics", [])]


def topic_is(kind: str, device: bool) -> Callable[[Life], None]:
    def check(life: Life) -> None:
        births_then(life, kind)
        for m in life.of(kind):
            want = f"spBv1.0/{GROUP}/{kind}/{NODE}"
            assert m.topic == want or (device and m.topic.startswith(want + "/") and m.device in ("cam0", "cam1")), \
                m.topic
    return check


def mqtt_flags(kind: str, qos: int = 0) -> Callable[[Life], None]:
    def check(life: Life) -> None:
        flags = life.publishes(kind)
        assert flags and set(flags) == {(qos, 0)}, flags
    return check


def seq_follows(kind: str) -> Callable[[Life], None]:
    """Every message of ``kind`` carries the previous message's seq + 1 (mod 256) within its session."""
    def check(life: Life) -> None:
        births_then(life, kind)
        for run in sessions(life):
            for prev, m in zip(run, run[1:]):
                if m.kind == kind:
                    assert m.seq == (prev.seq + 1) % 256, (prev.topic, prev.seq, m.topic, m.seq)  # type: ignore
    return check


def has_timestamp(kind: str) -> Callable[[Life], None]:
    def check(life: Life) -> None:
        births_then(life, kind)
        now = int(time.time() * 1000)
        for m in life.of(kind):
            assert now - 600_000 < m.doc["timestamp"] <= now, m.doc.get("timestamp")  # ms since the epoch, UTC
    return check


def every_metric_of_births(life: Life) -> None:
    for m in life.of("NBIRTH") + life.of("DBIRTH"):
        for metric in m.doc["metrics"]:
            assert metric.get("name") and metric.get("type") and "value" in metric, metric


def data_only_changes(kind: str) -> Callable[[Life], None]:
    """Each DATA metric's value differs from what the births or earlier data last said for that metric."""
    def check(life: Life) -> None:
        births_then(life, kind)
        last: dict[tuple[str, str], Any] = {}
        for m in life.messages:
            scope = m.device or ""
            if m.kind in ("NBIRTH", "DBIRTH"):
                last.update({(scope, k): v for k, v in m.metrics.items()})
            elif m.kind == kind:
                for name, value in m.metrics.items():
                    assert last.get((scope, name)) != value, (m.topic, name, value)
                    last[(scope, name)] = value
    return check


def nbirth_bdseq_matches_will(life: Life) -> None:
    for connection in connections(life):
        deaths = [m for m in connection if m.kind == "NDEATH"]
        for birth in (m for m in connection if m.kind == "NBIRTH"):
            assert deaths and birth.metrics["bdSeq"] == deaths[0].metrics["bdSeq"]


def bdseq_increments(life: Life) -> None:
    bd = [c[0].metrics["bdSeq"] for c in connections(life) if c[0].kind == "NBIRTH"]
    assert len(bd) == 2 and bd[1] == bd[0] + 1, bd  # a new CONNECT (after the host went offline): the next one
    assert life.of("NBIRTH")[0].doc["metrics"][0]["type"] == "Int64"


def ndeath_only_bdseq(life: Life) -> None:
    for m in life.of("NDEATH"):
        assert [(x["name"], x["type"]) for x in m.doc["metrics"]] == [("bdSeq", "Int64")] and m.seq is None


def rebirth_metric(life: Life) -> None:
    for m in life.of("NBIRTH"):
        (rebirth,) = [x for x in m.doc["metrics"] if x.get("name") == "Node Control/Rebirth"]
        assert rebirth["type"] == "Boolean" and rebirth["value"] is False and "alias" not in rebirth


def births_lead(life: Life) -> None:
    """Each session opens with NBIRTH and every live device's DBIRTH before any data; a DBIRTH later in it is for a
    device that was not live then (one that came back after its DDEATH)."""
    for run in sessions(life):
        lead = 0
        while lead < len(run) and run[lead].kind in ("NBIRTH", "DBIRTH"):
            lead += 1
        assert run[0].kind == "NBIRTH" and lead > 1, [m.kind for m in run[:4]]
        live = {m.device for m in run[1:lead]}
        for m in run[lead:]:
            if m.kind == "DDEATH":
                live.discard(m.device)
            elif m.kind == "DBIRTH":
                assert m.device not in live, f"a DBIRTH for {m.device} after data, while it was live"
                live.add(m.device)
            elif m.kind == "DDATA":
                assert m.device in live, f"DDATA for {m.device} before its DBIRTH"


def no_birth_before(mark: str) -> Callable[[Life], None]:
    def check(life: Life) -> None:
        online = life.marks[mark]
        first = life.messages[0]
        assert first.kind == "NBIRTH" and first.index > online, (first.topic, first.index, online)
        assert [s for i, s in life.states if i < first.index][-1]["online"] is True
    return check


def raw_metrics(life: Life, *kinds: str) -> list[Any]:
    """The metrics of these messages as the tests' own schema parses them (support.sparkplug_b): which fields
    are present on the wire, which Tahu's decoder does not say."""
    return [metric for m in life.messages if m.kind in kinds for metric in parse(m.raw).metrics]


def log_lines(life: Life, text: str) -> list[str]:
    return [line for line in life.broker_log.splitlines() if text in line]


def subscribed(topic: str) -> Callable[[Life], None]:
    def check(life: Life) -> None:
        assert log_lines(life, f"{CLIENT_ID} 1 {topic}"), f"no QoS 1 subscription to {topic}"
    return check


def will_registered(life: Life) -> None:
    lines = life.broker_log.splitlines()
    connects = [i for i, line in enumerate(lines) if f"as {CLIENT_ID} " in line]
    assert len(connects) == 2, connects  # the first connection and the one after the host's offline STATE
    for i in connects:
        assert "Will message specified" in lines[i + 1] and "(r0, q1)" in lines[i + 1], lines[i + 1]
        assert lines[i + 2].strip().endswith(f"spBv1.0/{GROUP}/NDEATH/{NODE}"), lines[i + 2]


def first_publish_is_nbirth_after_connack(life: Life) -> None:
    lines = life.broker_log.splitlines()
    starts = [i for i, line in enumerate(lines) if f"Sending CONNACK to {CLIENT_ID}" in line]
    for start in starts:
        first = next(line for line in lines[start:] if f"Received PUBLISH from {CLIENT_ID}" in line)
        assert f"/NBIRTH/{NODE}'" in first, first


def ndeath_then_disconnect_on_host_offline(life: Life) -> None:
    lines = [line for line in life.broker_log.splitlines() if CLIENT_ID in line and "PUBACK" not in line]
    death = next(i for i, line in enumerate(lines) if f"Received PUBLISH from {CLIENT_ID}" in line and "NDEATH" in line)
    assert f"Received DISCONNECT from {CLIENT_ID}" in lines[death + 1], lines[death:death + 2]  # nothing between
    offline = next(i for i, doc in life.states if i >= life.marks["offline"] and doc["online"] is False)
    after = [m for m in life.messages if m.index > offline]
    death = next(i for i, m in enumerate(after) if m.kind == "NDEATH")
    assert all(m.kind in DATA for m in after[:death]) and death <= 3, [m.kind for m in after[:death]]  # in flight
    assert after[death].metrics["bdSeq"] == life.of("NBIRTH")[0].metrics["bdSeq"]


def reconnects_after_host_offline(life: Life) -> None:
    ndeath_then_disconnect_on_host_offline(life)
    later = [m.kind for m in life.messages if life.marks["offline"] <= m.index < life.marks["online again"]]
    assert later[-1] == "NDEATH" and set(later) <= {"NDEATH", *DATA}  # connected again, no birth while offline
    assert len(log_lines(life, f"as {CLIENT_ID} ")) == 2
    reborn = [m for m in life.messages if m.index >= life.marks["online again"]]
    assert reborn[0].kind == "NBIRTH" and reborn[0].seq == 0


def stays_on_a_stale_offline(life: Life) -> None:
    between = [m for m in life.messages if life.marks["stale offline"] <= m.index < life.marks["offline"]]
    assert between and "NDEATH" not in {m.kind for m in between} and {"DDATA"} <= {m.kind for m in between}
    assert "ignoring a stale STATE" in life.child_log


def births_wait_for_host(life: Life) -> None:
    no_birth_before("online")(life)
    assert "ignoring a stale STATE" in life.child_log  # the stale online STATE was seen and judged
    assert not log_lines(life, f"{CLIENT_ID} 1 spBv1.0/STATE/+") and not log_lines(life, f"{CLIENT_ID} 1 spBv1.0/#")


def rebirth_on_request(life: Life) -> None:
    (ncmd, _topic) = [c for c in life.commands if c[1].endswith(f"NCMD/{NODE}")][-1]
    after = [m for m in life.messages if m.index > ncmd]
    first_birth = next(i for i, m in enumerate(after) if m.kind == "NBIRTH")
    assert len([m for m in after[:first_birth] if m.kind in DATA]) <= 3  # at most the one sample in flight
    reborn = after[first_birth:first_birth + 3]
    assert [(m.kind, m.device, m.seq) for m in reborn] == [("NBIRTH", None, 0), ("DBIRTH", "cam0", 1),
                                                           ("DBIRTH", "cam1", 2)]
    assert reborn[0].metrics["bdSeq"] == life.of("NBIRTH")[0].metrics["bdSeq"]


def null_values(life: Life) -> None:
    nulls = [m for m in raw_metrics(life, "NBIRTH", "DBIRTH") if m.is_null]
    assert nulls and all(m.WhichOneof("value") is None for m in nulls)
    assert all(m.WhichOneof("value") is not None for m in raw_metrics(life, "NBIRTH", "DBIRTH") if not m.is_null)
    assert metric_docs(life, "NBIRTH")[-1]["value"] is None  # Tahu: null


def aliases_in_births(life: Life) -> None:
    for metric in raw_metrics(life, "NBIRTH", "DBIRTH"):
        assert metric.HasField("name")
        assert metric.HasField("alias") or metric.name in ("bdSeq", "Node Control/Rebirth"), metric.name


def aliases_alone_in_data(life: Life) -> None:
    data = raw_metrics(life, *DATA)
    assert data and all(m.HasField("alias") and not m.HasField("name") for m in data)


def aliases_unique(life: Life) -> None:
    for run in sessions(life):
        owner: dict[int, tuple[str, str]] = {}
        for m in run:
            if m.kind in ("NBIRTH", "DBIRTH"):
                for metric in m.doc["metrics"]:
                    if "alias" in metric:
                        key = (m.device or "", metric["name"])
                        assert owner.setdefault(metric["alias"], key) == key, (metric["alias"], key)


def births_list_every_metric(life: Life) -> None:
    """Every DATA metric of a device (or the node) was in that device's (the node's) latest birth."""
    born: dict[str, set[int]] = {}
    for m in life.messages:
        scope = m.device or ""
        if m.kind in ("NBIRTH", "DBIRTH"):
            born[scope] = {x["alias"] for x in m.doc["metrics"] if "alias" in x}
        elif m.kind in DATA:
            assert {x["alias"] for x in m.doc["metrics"]} <= born[scope], m.topic


def datatypes_in_births_only(life: Life) -> None:
    assert all(m.HasField("datatype") for m in raw_metrics(life, "NBIRTH", "DBIRTH"))
    assert not any(m.HasField("datatype") for m in raw_metrics(life, *DATA))


def known_datatypes(life: Life) -> None:
    for m in raw_metrics(life, "NBIRTH", "DBIRTH", "NDEATH"):
        assert m.datatype in DATATYPES.values(), m.datatype
    assert {x["type"] for x in metric_docs(life, "NBIRTH", "DBIRTH")} <= set(DATATYPES)


def metric_timestamps(life: Life) -> None:
    now = int(time.time() * 1000)
    for m in raw_metrics(life, "NBIRTH", "DBIRTH", *DATA):
        assert m.HasField("timestamp") and now - 600_000 < m.timestamp <= now


def every_message_has_seq(life: Life) -> None:
    for m in life.messages:
        assert (m.seq is None) == (m.kind == "NDEATH"), (m.topic, m.seq)
        assert m.seq is None or 0 <= m.seq <= 255


def nbirth_seq_zero(life: Life) -> None:
    assert [m.seq for m in life.of("NBIRTH")] == [0, 0, 0]  # connect, rebirth, connect again


def unique_names(life: Life) -> None:
    for m in life.of("NBIRTH") + life.of("DBIRTH"):
        names = [x["name"] for x in m.doc["metrics"]]
        assert len({n.lower() for n in names}) == len(names), names


def ddeath_for_a_lost_device(life: Life) -> None:
    (death,) = life.of("DDEATH")
    assert death.device == "cam1" and death.seq is not None
    assert any(m.kind == "DBIRTH" and m.device == "cam1" and m.index > death.index for m in life.messages)


def one_connection_at_a_time(life: Life) -> None:
    assert not log_lines(life, "already connected, closing old connection")
    opened = [i for i, line in enumerate(life.broker_log.splitlines()) if f"as {CLIENT_ID} " in line]
    closed = [i for i, line in enumerate(life.broker_log.splitlines()) if f"Client {CLIENT_ID} disconnected" in line]
    assert opened[1] > closed[0]


def decodes(kind: str) -> Callable[[Life], None]:
    def check(life: Life) -> None:
        births_then(life, kind)
        assert all(m.doc.get("metrics") for m in life.of(kind))  # decoded by Tahu, with metrics
    return check


def will_payload(life: Life) -> None:
    will = life.messages[-1]  # after SIGKILL: the broker published the will
    assert will.kind == "NDEATH" and will.index >= life.marks["kill"]
    assert [(x["name"], x["type"], x["value"]) for x in will.doc["metrics"]] == [
        ("bdSeq", "Int64", life.of("NBIRTH")[-1].metrics["bdSeq"])]
    assert life.of("NDEATH")[0].metrics["bdSeq"] + 1 == will.metrics["bdSeq"]


def one_value_each(life: Life) -> None:
    """No metric twice in one message, so a message's values cannot be out of time order."""
    for m in life.messages:
        keys = [x.get("alias", x.get("name")) for x in m.doc.get("metrics", [])]
        assert len(keys) == len(set(keys)), (m.topic, keys)


def topic_levels(life: Life) -> None:
    for m in life.messages:
        parts = m.topic.split("/")
        assert parts[:2] == ["spBv1.0", GROUP] and parts[3] == NODE, m.topic
        assert len(parts) == (5 if m.kind.startswith("D") else 4), m.topic


def births_then_each(life: Life) -> None:
    for run in sessions(life):
        assert run[0].kind == "NBIRTH" and all(m.kind == "DBIRTH" for m in run[1:3])


def assert_clean_311(life: Life) -> None:
    lines = log_lines(life, f"as {CLIENT_ID} ")
    assert lines and all("(p2, c1," in line for line in lines), lines
