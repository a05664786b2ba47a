"""An OPC UA client from a third stack, open62541 (the ``o6`` package from PyPI), driven by
tests/opcua/test_opcua_o6.py. It runs with its own virtualenv's Python (tests/opcua/o6client/.venv, made by
scripts/setup-test.d/62-o6-client.sh), never the appliance's.

Usage: ``python client.py OPTIONS.json``. The options name the endpoint, the server certificate (the only one it
trusts), its own certificate and key, and ``sessions``: what to do, in order, each as one user on one channel:

- ``channel``: ``encrypted`` (Basic256Sha256, SignAndEncrypt) or ``forced-none``: the description of the first
  endpoint an earlier encrypted session discovered, pinned, with its mode and policy set to None;
- ``call``: a method by its string NodeId (its object is its parent path);
- ``specIds``: OPC 40100 NodeIds whose BrowseNames to read, and the VisionSystem's current state id;
- ``watch``: ResultReadyEventType events on the Server object, then the vision state until ``Halted``.

It prints one JSON object a line (``{"step": ...}``); o6's banner lines are not JSON. It leaves with
``os._exit``: an o6 client whose server went away can keep the process alive.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import threading
import time
from typing import Any

import numpy as np
import o6

MV = "http://opcfoundation.org/UA/MachineVision"
BASIC256SHA256 = "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256"
NONE = "http://opcfoundation.org/UA/SecurityPolicy#None"
SIGN_AND_ENCRYPT, NO_SECURITY = 3, 1
EVENT_FIELDS = ("ResultId", "IsPartial", "ResultState", "JobId", "CreationTime", "InternalRecipeId",
                "InternalConfigurationId", "ResultContent")


def say(step: str, **fields: Any) -> None:
    print(json.dumps({"step": step, **fields}, default=plain), flush=True)


def plain(value: Any) -> Any:
    """An OPC UA value as JSON: structures o6 cannot decode keep their type id and their body's bytes (hex)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, o6.NodeId):  # its namespace by URI
        return {"ns": getattr(value.ns, "uri", value.ns), "id": value.id}
    if isinstance(value, o6.ExtensionObject):
        body = value.body
        return {"typeId": plain(value.typeId), "body": body.hex() if isinstance(body, bytes) else plain(body)}
    if isinstance(value, o6.LocalizedText):
        return value.text
    if isinstance(value, o6.QualifiedName):
        return value.name
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return str(value)


def status_name(exc: BaseException, client: o6.Client) -> str:
    code = getattr(exc, "code", None)
    try:
        return o6.StatusCode(code).name if code is not None else str(client.state[2].name)
    except (ValueError, TypeError):
        return str(code)


class Run:
    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self.endpoints: list[Any] = []  # what the first encrypted session discovered

    def client(self, session: dict[str, Any]) -> o6.Client:
        options = self.options
        if session["channel"] == "encrypted":
            return o6.Client(options["endpoint"], certificate=options["certificate"],
                             privateKey=options["privateKey"], trustList=[options["serverCertificate"]],
                             securityMode=SIGN_AND_ENCRYPT, securityPolicy=BASIC256SHA256,
                             applicationUri=options["applicationUri"], username=session["user"],
                             password=session["password"])
        if not self.endpoints:
            raise SystemExit("a forced-none session needs an encrypted session before it (for the endpoints)")
        client = o6.Client(options["endpoint"], securityMode=NO_SECURITY, securityPolicy=NONE,
                           username=session["user"], password=session["password"], allowNonePolicyPassword=True,
                           trustList=[options["serverCertificate"]])
        pinned = copy.deepcopy(self.endpoints[0])
        say("pinned", policy=pinned.securityPolicyUri, mode=int(pinned.securityMode))
        pinned.securityMode = NO_SECURITY
        pinned.securityPolicyUri = NONE
        for token in pinned.userIdentityTokens:
            token.securityPolicyUri = NONE
        client.config.endpoint = pinned
        return client

    def session(self, session: dict[str, Any]) -> None:
        client = self.client(session)
        who = {"user": session["user"], "channel": session["channel"]}
        try:
            client.connect(createDefaultSubscription=bool(session.get("watch")))
        except Exception as exc:  # noqa: BLE001  (what the server answered is the result)
            say("refused", **who, status=status_name(exc, client))
            return
        say("session", **who, policy=client.config.securityPolicy, mode=int(client.config.securityMode))
        namespaces = list(client.read("i=2255"))
        ns, mv = namespaces.index(self.options["namespace"]), namespaces.index(MV)
        if not self.endpoints:
            self.endpoints = list(client.getEndpoints(self.options["endpoint"]))
        if "call" in session:
            self.call(client, ns, session["call"], who)
        if "specIds" in session:
            for nodeid in session["specIds"]:
                say("spec", id=nodeid, name=client.read(f"ns={mv};i={nodeid}", attr="BrowseName").name)
            state = client.read(f"ns={ns};s=VisionSystem.VisionStateMachine.CurrentState.Id")
            say("state-id", **plain(state))
        if session.get("watch"):
            self.watch(client, ns, mv, float(session["watch"]))
        client.disconnect()

    def call(self, client: o6.Client, ns: int, method: str, who: dict[str, str]) -> None:
        parent = method.rsplit(".", 1)[0]
        try:
            status, *outputs = client.call(f"ns={ns};s={parent}", f"ns={ns};s={method}")
        except Exception as exc:  # noqa: BLE001  (the Call service refused)
            say("call-refused", **who, status=status_name(exc, client))
            return
        say("called", **who, status=o6.StatusCode(status).name, outputs=[plain(o) for o in outputs])

    def watch(self, client: o6.Client, ns: int, mv: int, timeout_s: float) -> None:
        """Events of type i=1024 on the Server object (i=2253), then the vision state until Halted."""
        halted = threading.Event()
        fields = ["EventType", "SourceName"] + [f"{mv}:{name}" for name in EVENT_FIELDS]
        query = "SELECT " + ", ".join(f"/{f}" for f in fields) + f" WHERE OFTYPE ns={mv};i=1024"

        def on_event(values: dict[str, Any]) -> None:
            say("event", **{key.rsplit(":", 1)[-1].lstrip("/"): plain(v) for key, v in values.items()})

        def on_state(value: Any) -> None:
            say("state", value=plain(value))
            if plain(value) == "Halted":
                halted.set()

        client.monitorEvent("i=2253", on_event, query)
        say("subscribed", query=query)
        client.monitor(f"ns={ns};s=VisionSystem.VisionStateMachine.CurrentState", on_state, 0)
        if not halted.wait(timeout_s):
            say("timeout", waited_s=timeout_s)
            raise SystemExit(1)
        os._exit(0)  # the server is gone: no disconnect to wait for


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as file:
        options = json.load(file)
    run = Run(options)
    started = time.monotonic()
    for session in options["sessions"]:
        run.session(session)
    say("done", seconds=round(time.monotonic() - started, 2))


if __name__ == "__main__":
    try:
        main()
        code = 0
    except BaseException as exc:  # noqa: BLE001  (reported, then the process leaves whatever o6 still runs)
        say("error", error=f"{type(exc).__name__}: {exc}")
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 3
    sys.stdout.flush()
    os._exit(code)
