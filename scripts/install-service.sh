#!/usr/bin/env bash
# Install the appliance as a systemd service (run as root, from a checkout where scripts/setup.sh has run).
#
#   /opt/appliance/src      this source tree (templates, profiles; installed.json names the paths below), installed
#                           editable into
#   /opt/appliance/venv     the virtualenv the units run (plus numpy<2 for Triton's Python-backend stub)
#   /opt/appliance/triton   Triton: a link to /opt/tritonserver (Jetson igpu image) or a CPU build from PyPI
#   /etc/appliance/         appliance.yaml (kept if present, else docs/examples/appliance.yaml to edit) and
#                           engines/ (engine build profiles)
#   /var/lib/appliance/     state: models/ (detector, demo video), engines, repository, MQTT spool (user "appliance")
#   /etc/systemd/system/    appliance.service, appliance-build-engines.service (enabled)
#
# DESTDIR=/some/root installs the files under that root and skips the user, ownership and systemctl steps
# (how the tests check this script).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${DESTDIR:-}
PREFIX=$ROOT/opt/appliance
PYTHON=${PYTHON:-python3}
step() { echo "install: $*"; }

[ -n "$ROOT" ] || [ "$(id -u)" -eq 0 ] || { echo "install: run as root (or set DESTDIR)" >&2; exit 1; }
[ -f .models/yolov3-tiny/model.onnx ] || { echo "install: run scripts/setup.sh first (it fetches the detector)" >&2; exit 1; }

# Triton. On a Jetson the appliance needs the igpu build (TensorRT, the GPU) at /opt/tritonserver: the igpu image
# has it; on bare-metal JetPack it comes from Triton's igpu release tarball (docs/jetson.md). A CPU build there
# would run the detector on the ARM cores, so it is refused unless asked for.
TEGRA_RELEASE=${APPLIANCE_TEGRA_RELEASE:-/etc/nv_tegra_release}
TRITON_IGPU=${APPLIANCE_TRITON_IGPU:-/opt/tritonserver}
triton_missing=()
for need in lib/libtritonserver.so backends/python/libtriton_python.so backends/python/triton_python_backend_stub \
            backends/tensorrt/libtriton_tensorrt.so; do
  [ -e "$TRITON_IGPU/$need" ] || triton_missing+=("$need")
done
if [ -f "$TEGRA_RELEASE" ] && ((${#triton_missing[@]})) && [ "${APPLIANCE_ALLOW_CPU_TRITON:-}" != 1 ]; then
  {
    echo "install: this is a Jetson ($(head -n 1 "$TEGRA_RELEASE" | cut -c1-60)), but the Triton igpu build at"
    echo "         $TRITON_IGPU lacks: ${triton_missing[*]}"
    echo "         Extract Triton's igpu release tarball there (docs/jetson.md: e.g. tritonserver2.49.0-igpu.tar.gz from"
    echo "         the v2.49.0 release for JetPack 6.1/6.2), or run in the igpu image (Dockerfile.igpu)."
    echo "         APPLIANCE_ALLOW_CPU_TRITON=1 installs the CPU build instead (no GPU: the detector runs on the CPU)."
  } >&2
  exit 1
fi

step "source -> $PREFIX/src"
mkdir -p "$PREFIX/src"
tar --exclude=.git --exclude=.venv --exclude=.state --exclude=.triton --exclude=.models --exclude=__pycache__ --exclude=./installed.json \
    --exclude='*.egg-info' -cf - . | tar -xf - -C "$PREFIX/src"
# Where the installed config and state are, so operator commands (`appliance ota status`, `spool list`,
# `check-config`) find them without flags instead of treating /opt/appliance/src as a development checkout.
cat > "$PREFIX/src/installed.json" <<EOF
{"config": "$ROOT/etc/appliance/appliance.yaml", "state_dir": "$ROOT/var/lib/appliance",
 "engines_dir": "$ROOT/etc/appliance/engines", "models_dir": "$ROOT/var/lib/appliance/models",
 "triton_home": "$PREFIX/triton"}
EOF

# Pinned versions for this architecture; TensorRT's Python API (JetPack's python3-libnvinfer, never pip's) is
# seen through the system site-packages where the system Python has it.
CONSTRAINTS="constraints/linux-$(uname -m).txt"
[ -f "$CONSTRAINTS" ] || { echo "install: no $CONSTRAINTS: $(uname -m) is not supported (x86_64, aarch64)" >&2; exit 1; }
step "virtualenv -> $PREFIX/venv (pinned by $CONSTRAINTS)"
venv_args=()
"$PYTHON" -c 'import tensorrt' 2>/dev/null && venv_args+=(--system-site-packages)
[ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "${venv_args[@]}" "$PREFIX/venv"
"$PREFIX/venv/bin/python" -m pip install -q -c "$PREFIX/src/$CONSTRAINTS" -e "$PREFIX/src"
"$PREFIX/venv/bin/python" -m appliance.triton.stubsite

if ! ((${#triton_missing[@]})); then
  step "Triton: $TRITON_IGPU (igpu build)"
  ln -sfn "$TRITON_IGPU" "$PREFIX/triton"
else
  step "Triton: CPU build -> $PREFIX/triton"
  "$PREFIX/venv/bin/python" "$PREFIX/src/scripts/provision_triton.py" --dest "$PREFIX/triton"
fi

step "config and profiles -> $ROOT/etc/appliance"
mkdir -p "$ROOT/etc/appliance/engines"
cp engines/*.yaml "$ROOT/etc/appliance/engines/"
if [ ! -f "$ROOT/etc/appliance/appliance.yaml" ]; then
  cp docs/examples/appliance.yaml "$ROOT/etc/appliance/appliance.yaml"
  echo "install: wrote a starting config to $ROOT/etc/appliance/appliance.yaml: set device.id, the camera's URL and"
  echo "         the broker (the lines marked CHANGE), then check it with:"
  echo "         $PREFIX/venv/bin/appliance check-config --config $ROOT/etc/appliance/appliance.yaml"
fi

step "models -> $ROOT/var/lib/appliance/models"
mkdir -p "$ROOT/var/lib/appliance/models"
cp -r .models/. "$ROOT/var/lib/appliance/models/"
# The benchmarks play models/sample/sample.mp4 (setup builds it; a no-op when it was copied).
"$PREFIX/venv/bin/python" -m appliance.capture.sample "$ROOT/var/lib/appliance/models/sample/sample.mp4" >/dev/null

step "units -> $ROOT/etc/systemd/system"
mkdir -p "$ROOT/etc/systemd/system"
install -m 0644 systemd/appliance.service systemd/appliance-build-engines.service "$ROOT/etc/systemd/system/"

if [ -z "$ROOT" ]; then
  id appliance >/dev/null 2>&1 || useradd --system --home-dir /var/lib/appliance --shell /usr/sbin/nologin \
    --groups video appliance
  chown -R appliance:appliance /var/lib/appliance
  chgrp -R appliance /etc/appliance && chmod -R g+rX /etc/appliance
  systemctl daemon-reload
  systemctl enable appliance-build-engines.service appliance.service
  echo "install: done. Start with: systemctl start appliance; watch with: journalctl -fu appliance"
else
  echo "install: files are under $ROOT (DESTDIR: no user, no systemctl)"
fi
