#!/usr/bin/env bash
# An arm64 Debian 12 root run through qemu-user emulation, for the aarch64 check (scripts/check-aarch64.sh).
#
#   scripts/arm64-root.sh ensure          install qemu-user-static + debootstrap, register qemu-aarch64 with
#                                         binfmt_misc, and build the root unless a current one is there
#   scripts/arm64-root.sh run CMD...      run CMD as root inside it (bash -c), with /proc, /dev and a private
#                                         /dev/shm mounted and the host's CA bundle, DNS and pip settings
#   scripts/arm64-root.sh path            where the root is
#   scripts/arm64-root.sh state           `current KEY`, `stale KEY` or `missing KEY` (KEY: see below)
#
# The root lives outside the checkout ($APPLIANCE_ARM64_ROOT, default ~/.cache/appliance/arm64-root) and is
# kept between runs: what setup installs in it (apt packages, the virtualenv, Triton, the detector) is reused.
# It is reused only while KEY, a hash of the files that build and fill it (KEY_FILES), is the one it was built
# from: after a change to any of them it is rebuilt from debootstrap, so nothing an older setup left in it (a
# package since dropped from the constraints, an apt package) can make the check pass.
# The host's /sys is never mounted: ONNX Runtime's cpuinfo would read the x86 topology there and crash; two plain
# files stand in for the CPU lists it needs (run_inside). Needs root (debootstrap, mount, chroot).
set -euo pipefail

ROOT=${APPLIANCE_ARM64_ROOT:-$HOME/.cache/appliance/arm64-root}
SUITE=bookworm
# Python 3.11 like CI, a venv, and what setup.sh's own apt step needs to run at all.
INCLUDE=python3,python3-venv,ca-certificates,libpython3.11
BINFMT=/proc/sys/fs/binfmt_misc

# Relative to the checkout: this script, the Dockerfile steps and setup that run in the root, what they pin.
KEY_FILES=(scripts/arm64-root.sh Dockerfile.igpu scripts/setup.sh scripts/setup.d/*.sh scripts/setup-triton.sh
           scripts/provision_triton.py pyproject.toml constraints/linux-aarch64.txt)

say() { echo "arm64-root: $*" >&2; }
die() { say "error: $*"; exit 1; }

need_root() { [ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, mount and chroot need it)"; }

root_key() {
  (cd "$(dirname "$0")/.." && sha256sum "${KEY_FILES[@]}") | sha256sum | cut -c1-16
}

# current: built from this KEY; stale: built from another (or before keys); missing: not built.
root_state() {
  local marker=$ROOT/.appliance-root
  if [ ! -f "$marker" ]; then echo missing
  elif grep -qx "key $(root_key)" "$marker"; then echo current
  else echo stale
  fi
}

# rm -rf never follows a bind mount: a run killed before its unmount would otherwise take the host's /dev.
remove_tree() {
  [ -e "$1" ] || return 0
  if findmnt -rn -o TARGET | grep -q "^$1\(/\|\$\)"; then
    die "something is still mounted under $1 (an interrupted run?): umount it, then run again"
  fi
  rm -rf --one-file-system "$1"
}

host_tools() {
  local missing=()
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ -x /usr/bin/qemu-aarch64-static ] || missing+=(qemu-user-static)
  if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

register_binfmt() {
  # Debian's qemu-user-static ships the registration line but not update-binfmts here; write it ourselves.
  [ -e "$BINFMT/register" ] || mount -t binfmt_misc binfmt_misc "$BINFMT" \
    || die "cannot mount binfmt_misc on $BINFMT (a container needs it from its host, or --privileged)"
  if [ ! -e "$BINFMT/qemu-aarch64" ]; then
    local conf=/usr/lib/binfmt.d/qemu-aarch64.conf
    [ -f "$conf" ] || die "$conf is missing: reinstall qemu-user-static"
    cat "$conf" > "$BINFMT/register" || die "could not register qemu-aarch64 with binfmt_misc"
  fi
  grep -q '^enabled' "$BINFMT/qemu-aarch64" || die "qemu-aarch64 is registered but disabled in $BINFMT"
}

# The Debian mirror this host's apt already uses (deb822 or one-line sources), so the root reaches the same
# registry as the host and no address is written into the repository.
host_mirror() {
  local uri
  uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list(.d); set APPLIANCE_DEBIAN_MIRROR"
  echo "$uri"
}

build_root() {
  local state key
  state=$(root_state) key=$(root_key)
  [ "$state" = current ] && return 0
  [ "$state" = stale ] && say "$ROOT was built from other scripts or constraints than these (key $key): rebuilding"
  local mirror=${APPLIANCE_DEBIAN_MIRROR:-$(host_mirror)} started=$SECONDS tmp="$ROOT.partial"
  say "building an arm64 Debian 12 root in $ROOT (debootstrap, about 3 minutes)"
  remove_tree "$tmp"
  mkdir -p "$(dirname "$ROOT")"
  # Two stages, so dpkg skips its per-file fsync from the start (the second stage and every apt step later run
  # it under emulation). The root is a cache: a host crash mid-build leaves $tmp, which the next build removes.
  debootstrap --foreign --arch=arm64 --variant=minbase --include="$INCLUDE" "$SUITE" "$tmp" "$mirror" \
    >"$tmp.log" 2>&1 || { tail -n 20 "$tmp.log" >&2; die "debootstrap failed (log: $tmp.log)"; }
  echo force-unsafe-io > "$tmp/etc/dpkg/dpkg.cfg.d/appliance-unsafe-io"
  say "first stage (host) done in $((SECONDS - started)) s; second stage under emulation"
  chroot "$tmp" /debootstrap/debootstrap --second-stage >>"$tmp.log" 2>&1 \
    || { tail -n 20 "$tmp.log" >&2; die "debootstrap's second stage failed (log: $tmp.log)"; }
  printf 'built %s from %s\nkey %s\n' "$(date -u +%FT%TZ)" "$SUITE" "$key" > "$tmp/.appliance-root"
  remove_tree "$ROOT"
  mv "$tmp" "$ROOT"
  rm -f "$tmp.log"
  say "root ready in $((SECONDS - started)) s"
}

mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}

mount_once() {  # mount_once TARGET ARGS...: mount unless something is mounted there already
  local target=$1; shift
  mountpoint -q "$target" && return 0
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}

run_inside() {
  trap unmount_all EXIT
  mount_once "$ROOT/proc" -t proc proc
  mount_once "$ROOT/dev" --bind /dev
  mount_once "$ROOT/dev/pts" --bind /dev/pts
  mount_once "$ROOT/dev/shm" -t tmpfs -o size=2g,mode=1777 tmpfs  # private: the host's rings stay the host's
  # No /sys (see above), but ONNX Runtime's cpuinfo needs the CPU lists: without them ORT 1.23 aborts on aarch64
  # ("Attempt to use DefaultLogger") instead of warning. Plain files in the root's /sys give it the host's count.
  mkdir -p "$ROOT/sys/devices/system/cpu"
  echo "0-$(($(nproc) - 1))" | tee "$ROOT/sys/devices/system/cpu/possible" > "$ROOT/sys/devices/system/cpu/present"
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # The host's CA bundle and pip settings: the registries are reached the same way from inside.
  [ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/"
  [ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
  # pip does not byte-compile what it installs here (PIP_COMPILE=0; pip reads PIP_NO_COMPILE=1 the wrong way round):
  # under emulation compiling is half of a cold install (the image's dependencies into a fresh venv: 101 s, 51 s
  # without; the same packages), and .pyc files are only a cache Python writes on first import. A PIP_* set on
  # the host still wins.
  local env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PIP_COMPILE=0)
  local var
  for var in $(compgen -e); do
    case $var in PIP_*|CI|APPLIANCE_*) env+=("$var=${!var}") ;; esac
  done
  env -i "${env[@]}" chroot "$ROOT" /bin/bash -c "$*"
}

case ${1:-} in
  ensure) need_root; host_tools; register_binfmt; build_root ;;
  run)
    shift; [ $# -gt 0 ] || die "usage: $0 run CMD..."
    need_root; host_tools; register_binfmt; build_root; run_inside "$@" ;;
  path) echo "$ROOT" ;;
  state) echo "$(root_state) $(root_key)" ;;
  *) die "usage: $0 ensure | run CMD... | path | state" ;;
esac
