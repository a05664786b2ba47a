"""Over-the-air model updates: signed bundles, verification, staging, engine build, golden-frame checks,
zero-downtime switch through Triton's explicit model control, health watch with automatic rollback.

Modules: ``manifest`` (the signed manifest), ``signing`` (Ed25519 keys), ``bundle`` (build/open archives),
``store`` (state directory, crash-safe active pointer), ``golden`` (detection comparison), ``offline`` (the
switcher for installs while the appliance is stopped), ``health`` (health-watch policy), ``manager`` (the
pipeline), ``delivery`` (MQTT command handler, inbox watcher, downloads), ``push`` and ``cli`` (the command
line). What is served, and the Triton switch, are ``appliance.detector.serving``'s: OTA sits on it and maps its
``ServingError`` to ``OtaRejected``. Importing this package has no side effects.
"""

from appliance.ota.errors import OtaError, OtaRejected, RollbackError

__all__ = ["OtaError", "OtaRejected", "RollbackError"]
