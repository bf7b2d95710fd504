#!/bin/sh
# A Python 3.11 base image made from Debian's own packages, for hosts that reach Debian's repositories
# and PyPI but no image registry: the stand-in for python:3.11-slim-bookworm that deploy/Dockerfile
# builds on (`--build-arg PYTHON_IMAGE=TAG`). Run as root, with debootstrap and podman installed:
#
#   deploy/podman/base-image.sh localhost/ingress-base:bookworm [ROOTFS.tar]
#
# It debootstraps Debian bookworm's minimal system with its python3 (3.11), trims what no container
# reads, copies in this machine's CA bundle (pip inside the build then trusts what this machine
# trusts), and imports the result as TAG. With ROOTFS.tar given, the root file system is kept there,
# and an existing ROOTFS.tar is imported as it is: the tests cache it under ~/.cache/ingress, keyed by a
# digest of this file. PODMAN names the command to import with (default: podman).
set -eu

SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# python3-pip: the Dockerfile's builder runs `python -m pip wheel`; python3-venv: its `python -m venv`;
# python-is-python3: `python` for the HEALTHCHECK and the manifests' exec probes; libgomp1: the OpenMP
# runtime of an engine built with it (the tests run llama-server on this base, beside the edge).
PACKAGES=python3,python3-venv,python3-pip,python-is-python3,ca-certificates,libgomp1
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

[ $# -ge 1 ] || { echo "usage: $0 TAG [ROOTFS.tar]" >&2; exit 2; }
tag=$1
tarball=${2:-}

if [ -z "$tarball" ] || [ ! -f "$tarball" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    root=$work/rootfs
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
        "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale
    if [ -f "$CA_BUNDLE" ]; then
        cp "$CA_BUNDLE" "$root$CA_BUNDLE"
    fi
    tarball=${tarball:-$work/rootfs.tar}
    tar --numeric-owner -C "$root" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
fi

# The variables python:3.11-slim sets that matter here, and the CA bundle for pip and Python's ssl.
${PODMAN:-podman} import \
    --change "ENV=LANG=C.UTF-8" \
    --change "ENV=PIP_CERT=$CA_BUNDLE" \
    --change "ENV=SSL_CERT_FILE=$CA_BUNDLE" \
    --change 'CMD=["python3"]' \
    "$tarball" "$tag"
