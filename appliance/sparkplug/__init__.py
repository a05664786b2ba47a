"""Sparkplug B edge node (docs/sparkplug.md): the appliance as a node, each camera a device, beside the JSON topics."""
