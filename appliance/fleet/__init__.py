"""The operator's side of model updates, run from a laptop or CI, never on the device: building and signing
bundles, pushing them, and staged rollouts to device groups. The device's side is :mod:`appliance.ota`."""
