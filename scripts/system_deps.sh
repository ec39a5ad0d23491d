#!/usr/bin/env bash
# Installs the system packages the tests use, where they are missing:
#   chromium                          - renders the report's index.html in a test
#   google-cloud-cli-pubsub-emulator  - the real Pub/Sub emulator for the estimator tests
# Needs root (or passwordless sudo) for apt-get; otherwise says what to install and fails.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if ! dpkg -s google-cloud-cli-pubsub-emulator >/dev/null 2>&1; then
  missing+=(google-cloud-cli-pubsub-emulator)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
  echo "error: the tests need these Debian packages: ${missing[*]}" >&2
  echo "       install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing system packages: ${missing[*]}" >&2
$SUDO apt-get update -qq
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null; then
  # The emulator lives in Google's apt repository; if that is not configured, say so.
  echo "error: could not install ${missing[*]} with apt-get" >&2
  exit 1
fi
