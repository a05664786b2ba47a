"""Over-the-air model updates: signed bundles, verification, staging, engine build, golden-frame checks,
zero-downtime switch through Triton's explicit model control, health watch with automatic rollback.

Modules: ``manifest`` (the signed manifest), ``signing`` (Ed25519 keys), ``bundle`` (build/open archives),
``store`` (state directory, crash-safe active pointer), ``golden`` (detection comparison), ``switcher`` (the
switch boundary and its Triton implementation), ``health`` (health-watch policy), ``manager`` (the pipeline),
``delivery`` (MQTT command handler, inbox watcher, downloads), ``push`` and ``cli`` (the command line).
Importing this package has no side effects.
"""

from appliance.ota.errors import OtaError, OtaRejected, RollbackError

__all__ = ["OtaError", "OtaRejected", "RollbackError"]
