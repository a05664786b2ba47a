// A PLC-style OPC UA client from another stack (node-opcua), driven by tests/opcua/test_opcua_interop.py.
// Usage: node client.js <options.json>. It trusts only the server certificate it is given, signs in with its own
// certificate and a user name, and prints what it does one line at a time ("key: value"); exit code 0 on success.
"use strict";
const fs = require("fs");
const {
    OPCUAClient, MessageSecurityMode, SecurityPolicy, UserTokenType, AttributeIds, NodeClass,
    ClientSubscription, ClientMonitoredItem, TimestampsToReturn, constructEventFilter, ofType,
} = require("node-opcua-client");
const { OPCUACertificateManager } = require("node-opcua-certificate-manager");

const options = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const POLICIES = { Basic256Sha256: SecurityPolicy.Basic256Sha256, Aes256Sha256RsaPss: SecurityPolicy.Aes256_Sha256_RsaPss,
                   None: SecurityPolicy.None };  // None: a channel forced to no security, whatever the server offers
if (!(options.policy in POLICIES)) throw new Error(`unknown policy ${options.policy}`);
const say = (key, value) => console.log(`${key}: ${typeof value === "string" ? value : JSON.stringify(value)}`);

async function browse(session, nodeId, path, depth) {
    const result = await session.browse({ nodeId, resultMask: 63, nodeClassMask: 0, includeSubtypes: true,
                                          referenceTypeId: "HierarchicalReferences", browseDirection: 0 });
    for (const ref of result.references || []) {
        const name = ref.browseName.name;
        const child = `${path}/${name}`;
        const id = ref.nodeId.toString();
        if (ref.nodeClass === NodeClass.Variable) {
            const value = await session.read({ nodeId: ref.nodeId, attributeId: AttributeIds.Value });
            say("browse", `${child} = ${JSON.stringify(value.value.value)} (${value.value.dataType}) ${id}`);
        } else {
            say("browse", `${child} (${NodeClass[ref.nodeClass]}) ${id}`);
        }
        if (depth > 1 && ref.nodeClass === NodeClass.Object && id.startsWith("ns=")) {
            await browse(session, ref.nodeId, child, depth - 1);
        }
    }
}

async function watch(session, nodeIds, timeoutMs) {
    const subscription = ClientSubscription.create(session, { requestedPublishingInterval: 100,
        requestedLifetimeCount: 600, requestedMaxKeepAliveCount: 20, publishingEnabled: true });
    const first = {};
    const done = new Promise((resolve) => {
        for (const nodeId of nodeIds) {
            const item = ClientMonitoredItem.create(subscription, { nodeId, attributeId: AttributeIds.Value },
                { samplingInterval: 0, queueSize: 100, discardOldest: true }, TimestampsToReturn.Both);
            item.on("changed", (dataValue) => {
                const value = BigInt(dataValue.value.value[0] * 2 ** 32 + dataValue.value.value[1]);
                say("changed", `${nodeId} = ${value} (${dataValue.value.dataType})`);
                if (!(nodeId in first)) first[nodeId] = value;
                else if (value > first[nodeId]) resolve(nodeId);
            });
        }
    });
    const timer = new Promise((resolve) => setTimeout(() => resolve(null), timeoutMs));
    const increased = await Promise.race([done, timer]);
    await subscription.terminate();
    return increased;
}

// OPC 40100 by the specification's NodeIds: their browse names, then ResultReady events on the Server object, then
// the vision state until the server goes away.
async function machineVision(session) {
    const mv = (await session.readNamespaceArray()).indexOf("http://opcfoundation.org/UA/MachineVision");
    for (const id of options.specIds) {
        const name = await session.read({ nodeId: `ns=${mv};i=${id}`, attributeId: AttributeIds.BrowseName });
        say("spec", `${id} ${name.value.value ? name.value.value.name : name.statusCode.name}`);
    }
    const subscription = ClientSubscription.create(session, { requestedPublishingInterval: 100,
        requestedLifetimeCount: 600, requestedMaxKeepAliveCount: 20, publishingEnabled: true });
    const fields = ["EventType", "SourceName", "ResultId", "IsPartial", "ResultState", "JobId", "CreationTime"];
    const filter = constructEventFilter(fields.map((f, i) => (i < 2 ? f : `${mv}:${f}`)), ofType(`ns=${mv};i=1024`));
    const events = ClientMonitoredItem.create(subscription, { nodeId: "i=2253", attributeId: AttributeIds.EventNotifier },
        { queueSize: 100, filter, discardOldest: true }, TimestampsToReturn.Both);
    await new Promise((resolve) => events.on("initialized", resolve));
    const seen = new Promise((resolve) => events.on("changed", (values) => {
        const event = {};
        fields.forEach((f, i) => { event[f] = values[i].value; });
        say("event", JSON.stringify(event));
        resolve();
    }));
    say("subscribed", "events on the Server object");
    await Promise.race([seen, new Promise((resolve) => setTimeout(resolve, options.timeoutMs))]);
    const ns = (await session.readNamespaceArray()).indexOf(options.namespace);
    const state = ClientMonitoredItem.create(subscription,
        { nodeId: `ns=${ns};s=VisionSystem.VisionStateMachine.CurrentState`, attributeId: AttributeIds.Value },
        { samplingInterval: 0, queueSize: 10, discardOldest: true }, TimestampsToReturn.Both);
    state.on("changed", (dataValue) => say("state", dataValue.value.value.text));
    await new Promise((resolve) => setTimeout(resolve, options.timeoutMs));  // the test stops the server meanwhile
}

async function main() {
    const manager = new OPCUACertificateManager({ rootFolder: options.pki, automaticallyAcceptUnknownCertificate: false });
    await manager.initialize();
    await manager.trustCertificate(fs.readFileSync(options.serverCertificate));
    const client = OPCUAClient.create({
        applicationName: "node-opcua interop test", applicationUri: options.applicationUri,
        securityMode: options.policy === "None" ? MessageSecurityMode.None : MessageSecurityMode.SignAndEncrypt,
        securityPolicy: POLICIES[options.policy],
        certificateFile: options.certificate, privateKeyFile: options.privateKey,
        clientCertificateManager: manager, endpointMustExist: false,
        connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    });
    try {
        await client.connect(options.endpoint);
        say("connected", `${options.endpoint} ${options.policy} ${options.policy === "None" ? "None" : "SignAndEncrypt"}`);
        if (options.policy === "None") {  // pin the server's first endpoint description over the None channel
            const pinned = client._serverEndpoints[0];
            client.findEndpoint = () => pinned;
            client.findEndpointForSecurity = () => pinned;
            say("pinned", `${pinned.securityPolicyUri} ${MessageSecurityMode[pinned.securityMode]}`);
        }
        const session = await client.createSession({ type: UserTokenType.UserName, userName: options.user,
                                                     password: options.password });
        say("session", `user ${options.user}`);
        if (options.call) {  // a method by its string NodeId in options.namespace; its object is its parent path
            const ns = (await session.readNamespaceArray()).indexOf(options.namespace);
            const objectId = `ns=${ns};s=${options.call.split(".").slice(0, -1).join(".")}`;
            const result = await session.call({ objectId, methodId: `ns=${ns};s=${options.call}`, inputArguments: [] });
            say("called", `${options.call} ${result.statusCode.name}`);
        }
        if (options.specIds) {
            await machineVision(session);
        }
        if (options.browse) {
            const namespaces = await session.readNamespaceArray();
            const ns = namespaces.indexOf(options.namespace);
            say("namespace", `${options.namespace} = ${ns}`);
            await browse(session, `ns=${ns};s=VisionSystem`, options.browse, 6);
            const ids = options.watch.map((s) => `ns=${ns};s=${s}`);
            const started = Date.now();
            const increased = await watch(session, ids, options.timeoutMs);
            say("increased", `${increased || "none"} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
            if (!increased) process.exitCode = 1;
        }
        await session.close();
    } catch (err) {
        say("refused", err.message.split("\n")[0]);
        process.exitCode = 2;
    } finally {
        await client.disconnect();
    }
}

// The certificate manager's folder watchers would keep node alive for seconds after the work is done.
main().then(() => process.exit(process.exitCode || 0), (err) => { say("error", err.stack); process.exit(3); });
