#!/usr/bin/env bash
# Make the small local base image the docker tests build on: prbench-test/bookworm:base.
#
# No image registry is reachable from CI, so the base is made from Debian packages with debootstrap and
# imported. Idempotent: an existing image is kept (re-importing would change its id and invalidate every
# test image built on it). Usage: .ci/base-image.sh [IMAGE]   (needs root, docker and debootstrap)
set -euo pipefail

IMAGE="${1:-prbench-test/bookworm:base}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base-image: $IMAGE already present ($(docker image inspect --format '{{.Id}}' "$IMAGE"))"
    exit 0
fi
for tool in docker debootstrap; do
    command -v "$tool" >/dev/null || { echo "base-image: '$tool' not found (apt-get install -y docker.io debootstrap)" >&2; exit 1; }
done

ROOTFS="$(mktemp -d /tmp/prbench-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT

echo "base-image: debootstrap bookworm into $ROOTFS (about a minute)"
# python3-setuptools lets the tests build editable stand-in packages with --no-build-isolation, offline; g++ and
# python3-dev are what Inductor's C++ codegen compiles with (the cpu-docker recipe runs real torch on this base).
debootstrap --variant=minbase \
    --include=python3,python3-pip,python3-setuptools,python3-dev,g++,git,ca-certificates \
    bookworm "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || { tail -20 "$ROOTFS.log" >&2; exit 1; }
rm -f "$ROOTFS.log"

# Debian marks its Python as externally managed (PEP 668); the real ROCm/CUDA images install into their own
# environment freely, so the stand-in base behaves like them.
rm -f "$ROOTFS"/usr/lib/python3*/EXTERNALLY-MANAGED
# Package caches and logs only make the image bigger.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*

tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$IMAGE" >/dev/null
echo "base-image: imported $IMAGE ($(docker image inspect --format '{{.Id}}' "$IMAGE"))"
