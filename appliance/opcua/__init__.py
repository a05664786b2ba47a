"""The OPC UA server a PLC reads (docs/opcua.md): config, address space, value updates, users and certificates."""
