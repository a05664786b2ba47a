// Eclipse Tahu's JavaScript Sparkplug B codec (npm sparkplug-payload) for the Python tests
// (tests/support/tahu.py). One JSON request per line on stdin, one JSON answer per line on stdout:
//   {"op": "decode", "payload": <base64>, "datatypes": {"<alias>": <datatype>}}
//       -> the payload as Tahu's decodePayload gives it. "datatypes" lends a DATA metric sent by alias alone the
//          datatype its birth announced: Tahu reads a value only through the metric's datatype.
//   {"op": "encode", "payload": {...Tahu's payload object...}}  -> {"payload": <base64>}
//   {"op": "schema", "path": "<file.proto>"}  -> that .proto as parsed by protobufjs (its JSON descriptor)
// 64-bit integers come back as {"long": "<decimal>", "unsigned": bool}; errors as {"error": "..."}.
"use strict";

const readline = require("readline");
const Long = require("long");
const protobuf = require("protobufjs");
const tahu = require("sparkplug-payload").get("spBv1.0");
const proto = require("sparkplug-payload/lib/sparkplugPayloadProto").org.eclipse.tahu.protobuf;

function plain(value) {
  if (Long.isLong(value)) {
    return {long: value.toString(), unsigned: value.unsigned};
  }
  if (value instanceof Uint8Array) {
    return {bytes: Buffer.from(value).toString("base64")};
  }
  if (Array.isArray(value)) {
    return value.map(plain);
  }
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  }
  return value;
}

function decode(request) {
  let bytes = Buffer.from(request.payload, "base64");
  const datatypes = request.datatypes || {};
  if (Object.keys(datatypes).length) {
    const raw = proto.Payload.decode(bytes);
    for (const metric of raw.metrics) {
      const alias = metric.alias === null || metric.alias === undefined ? null : metric.alias.toString();
      if (!metric.hasOwnProperty("datatype") && alias !== null && datatypes[alias] !== undefined) {
        metric.datatype = datatypes[alias];
      }
    }
    bytes = proto.Payload.encode(raw).finish();
  }
  return plain(tahu.decodePayload(bytes));
}

function encode(request) {
  const payload = request.payload;
  for (const metric of payload.metrics || []) {
    if (typeof metric.value === "string" && /^(Int64|UInt64|DateTime)$/.test(metric.type)) {
      metric.value = Long.fromString(metric.value, metric.type !== "Int64");
    }
  }
  return {payload: Buffer.from(tahu.encodePayload(payload)).toString("base64")};
}

function answer(line) {
  const request = JSON.parse(line);
  if (request.op === "decode") {
    return decode(request);
  }
  if (request.op === "encode") {
    return encode(request);
  }
  if (request.op === "schema") {
    return new protobuf.Root().loadSync(request.path, {keepCase: true}).toJSON();
  }
  throw new Error(`unknown op ${request.op}`);
}

readline.createInterface({input: process.stdin}).on("line", (line) => {
  let out;
  try {
    out = answer(line);
  } catch (err) {
    out = {error: String(err && err.stack || err)};
  }
  process.stdout.write(JSON.stringify(out) + "\n");
});
