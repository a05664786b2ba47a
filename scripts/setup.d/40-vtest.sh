#!/usr/bin/env bash
# The analytics tests' moving scene: OpenCV's vtest.avi (people walking, 768x576, 795 frames at 10 fps), shipped
# by Debian's opencv-doc package. That package is ~96 MB, so only its .deb is downloaded (no install) and the one
# file extracted into .models/vtest/vtest.avi. A no-op once that file exists.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.models/vtest/vtest.avi
if [ -s "$dest" ]; then
  exit 0
fi
echo "setup: fetching vtest.avi from Debian's opencv-doc into $dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
member=./usr/share/doc/opencv-doc/examples/data/vtest.avi
if ! (cd "$work" && apt-get download -qq opencv-doc >/dev/null 2>&1); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq  # a fresh host has no package lists yet
  (cd "$work" && apt-get download -qq opencv-doc >/dev/null)
fi
(cd "$work" && dpkg-deb --fsys-tarfile opencv-doc_*.deb | tar -x "$member")
mkdir -p "$(dirname "$dest")"
mv "$work/$member" "$dest.tmp"
mv "$dest.tmp" "$dest"
