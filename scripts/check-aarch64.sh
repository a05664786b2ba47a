#!/usr/bin/env bash
# The aarch64 check: the README's setup and a smoke set on arm64 Debian 12 under qemu-user emulation, proving
# the install path, Triton's aarch64 build and the detector on the architecture a Jetson has. .ci/run calls it.
#
#   scripts/check-aarch64.sh            build or reuse the arm64 root (scripts/arm64-root.sh), copy this checkout
#                                       into it, run the Dockerfile.igpu steps and scripts/aarch64-smoke.sh there
#
# The host (x86_64) first writes its own detections on real images; the root must reproduce them. What the
# emulated root would only repeat slowly, the host does natively: it downloads the arm64 wheels the constraints pin
# into a wheelhouse in the root (the root's pip installs from it, no index), the arm64 Triton wheel into the
# root's wheel cache, and copies its own .models (the converted detector, the sample videos) into the root's
# checkout; the Dockerfile's steps still fetch and convert the detector under emulation. docs/jetson.md says
# what is proven where. What setup installs in the root is kept between runs while the files that built it are
# unchanged (scripts/arm64-root.sh). Needs root. APPLIANCE_SKIP_AARCH64=1 skips it (say so wherever that is used).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${APPLIANCE_SKIP_AARCH64:-}" = 1 ]; then
  echo "aarch64: SKIPPED (APPLIANCE_SKIP_AARCH64=1)"
  exit 0
fi
started=$(date +%s)
IMAGES=(/usr/share/darknet/data/dog.jpg /usr/share/darknet/data/person.jpg /usr/share/darknet/data/horses.jpg)
WHEELHOUSE=/var/cache/appliance/wheelhouse   # inside the root
phase_started=$started
took() { local now; now=$(date +%s); echo "aarch64: $1 took $((now - phase_started)) s"; phase_started=$now; }

# The arm64 wheels for the root's Python and glibc, downloaded natively: every pin in the constraints, the
# build backend pyproject.toml names, pip itself (setup upgrades it), the stub site's numpy<2 and the
# detector's sdist. The root's pip then resolves and installs from here with no index (see the run lines).
host_wheelhouse() {
  local dest=$ROOT$WHEELHOUSE py glibc stamp tags=() y
  py=$(basename "$(readlink -f "$ROOT/usr/bin/python3")")   # python3.11
  py=${py#python}
  glibc=$(dpkg-query --admindir="$ROOT/var/lib/dpkg" -W -f='${Version}' libc6 | cut -d- -f1)   # 2.36
  stamp="$dest/.downloaded-$( (echo "$py $glibc"; cat constraints/linux-aarch64.txt pyproject.toml) | sha256sum | cut -c1-16)"
  [ -f "$stamp" ] && { echo "aarch64: wheelhouse for Python $py, glibc $glibc already in $ROOT$WHEELHOUSE"; return 0; }
  echo "aarch64: downloading the arm64 wheels for Python $py, glibc $glibc into $ROOT$WHEELHOUSE (on the host)"
  for ((y = ${glibc#2.}; y >= 17; y--)); do tags+=(--platform "manylinux_2_${y}_aarch64"); done
  tags+=(--platform manylinux2014_aarch64 --python-version "$py" --implementation cp --abi "cp${py/./}")
  local pip=(.venv/bin/python -m pip download -q --disable-pip-version-check -d "$dest")
  local build stub sdist
  build=$(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")')
  stub=$(.venv/bin/python -c 'from appliance.triton.stubsite import REQUIREMENT; print(REQUIREMENT)')
  sdist=$(.venv/bin/python -c 'from appliance.detector.source.fetch import SDIST; print(SDIST)')
  mkdir -p "$dest"
  "${pip[@]}" --only-binary=:all: "${tags[@]}" -r constraints/linux-aarch64.txt $build pip
  "${pip[@]}" --only-binary=:all: "${tags[@]}" --no-deps "$stub"
  "${pip[@]}" --no-binary=:all: --no-deps "$sdist"
  rm -f "$dest"/.downloaded-*
  touch "$stamp"
}

scripts/arm64-root.sh ensure
ROOT=$(scripts/arm64-root.sh path)
SRC=/work/appliance   # the checkout's copy inside the root
took "the root (built or reused)"

host_wheelhouse
echo "aarch64: Triton's arm64 wheel into the root's wheel cache (on the host)"
.venv/bin/python scripts/provision_triton.py --fetch-only aarch64 --cache "$ROOT/root/.cache/appliance/wheels"
took "host downloads"
# The root's pip: the host's wheelhouse only (arm64-root.sh passes PIP_* in).
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$WHEELHOUSE

echo "aarch64: copying the checkout and the host's .models into $ROOT$SRC (its .venv and .triton from the last run stay)"
mkdir -p "$ROOT$SRC"
find "$ROOT$SRC" -mindepth 1 -maxdepth 1 ! -name .venv ! -name .triton ! -name .cache -exec rm -rf {} +
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$ROOT$SRC"
# Architecture-independent files setup would otherwise make again under emulation (the detector's conversion is
# numpy, the videos are data): setup's model steps find them and skip. The Dockerfile steps below still convert.
cp -a .models "$ROOT$SRC/.models"

echo "aarch64: detections of the x86_64 host on ${#IMAGES[@]} real images"
.venv/bin/python scripts/detect_images.py "${IMAGES[@]}" 2>"$ROOT/tmp/x86-detections.log" > "$ROOT/tmp/x86-detections.json" \
  || { tail -n 20 "$ROOT/tmp/x86-detections.log" >&2; exit 1; }

took "copy and host detections"

echo "aarch64: Dockerfile.igpu's RUN steps, in order, in the root (Docker's engine cannot run here)"
.venv/bin/python scripts/dockerfile_steps.py Dockerfile.igpu --src "$SRC" > "$ROOT/tmp/dockerfile-steps.sh"
scripts/arm64-root.sh run "bash /tmp/dockerfile-steps.sh"
# The detector the Dockerfile's step just converted under emulation must be the host's, byte for byte: the one
# lent to the root's checkout above (and compared on images below) is then exactly what arm64 makes itself.
converted=$ROOT/var/lib/appliance/models/yolov3-tiny/model.onnx
cmp "$converted" .models/yolov3-tiny/model.onnx \
  || { echo "aarch64: $converted differs from the host's .models/yolov3-tiny/model.onnx" >&2; exit 1; }
echo "aarch64: the detector converted under emulation is byte-identical to the host's"
took "Dockerfile steps"

scripts/arm64-root.sh run "cd $SRC && scripts/aarch64-smoke.sh /tmp/x86-detections.json ${IMAGES[*]}"
took "smoke set"
echo "aarch64: check passed in $(($(date +%s) - started)) s"
