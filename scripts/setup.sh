#!/usr/bin/env bash
# Install what the appliance and its demo need on a Debian 12 / Ubuntu host, idempotently: system packages
# (apt), a virtualenv at .venv with the project and its test extras, the CPU-host Triton distribution at .triton,
# the detector model and the videos. What only the tests need (a browser, interop clients) is
# scripts/setup-test-tools.sh, which scripts/test.sh runs. Safe to run again; each step is skipped when done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
PYVER=$("$PYTHON" -c 'import sys; print(f"{sys.version_info.major}.{sys.version_info.minor}")')

APT_PACKAGES=(
  "libpython${PYVER}"                       # the Python-backend stub links the shared libpython
  mosquitto mosquitto-clients               # a real broker for the MQTT tests and the demo
  ffmpeg                                    # test videos, RTSP publishing
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav
  gir1.2-gst-rtsp-server-1.0 python3-gi     # a real RTSP server for the capture tests
  darknet                                   # the classic test images in /usr/share/darknet/data
  systemd                                   # systemd-analyze verify for the unit files
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Pinned versions for this architecture (scripts/lock.py writes them), so every install gets the same packages.
CONSTRAINTS="constraints/linux-$(uname -m).txt"
[ -f "$CONSTRAINTS" ] || { echo "setup: error: no $CONSTRAINTS: this architecture is not supported (x86_64, aarch64)" >&2; exit 1; }

# The virtualenv is rebuilt only when pyproject.toml or the constraints change. Where the system Python has
# TensorRT (JetPack's python3-libnvinfer; pip's tensorrt is not for Jetson), the venv sees system packages.
stamp=".venv/.installed-$(cat pyproject.toml "$CONSTRAINTS" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing the project into .venv (pinned by $CONSTRAINTS)"
  venv_args=()
  "$PYTHON" -c 'import tensorrt' 2>/dev/null && venv_args+=(--system-site-packages)
  [ -x .venv/bin/python ] || "$PYTHON" -m venv "${venv_args[@]}" .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c "$CONSTRAINTS" -e '.[test]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# Triton: a distribution that is already there (APPLIANCE_TRITON_HOME, or /opt/tritonserver: the igpu image's or
# JetPack's) is used as it is; otherwise the CPU build for this architecture (x86_64 or aarch64) is laid out in
# .triton from PyPI (scripts/setup-triton.sh).
scripts/setup-triton.sh
# numpy<2 for the Python-backend stub's embedded interpreter (its pybind11 predates NumPy 2; docs/triton.md).
.venv/bin/python -m appliance.triton.stubsite

# Later steps (detector model, ...) register themselves here.
for step in scripts/setup.d/*.sh; do
  [ -e "$step" ] && bash "$step"
done
echo "setup: done"
