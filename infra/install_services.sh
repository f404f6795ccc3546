#!/usr/bin/env bash
# Install the Debian packages the infra tests need, only where missing (idempotent).
#   postgresql  -> infra/mlflow_server.sh (initdb/pg_ctl under /usr/lib/postgresql/*/bin)
#   prometheus  -> infra/prometheus.sh    (the binary only; the system service is not used)
#   chromium    -> infra/screenshot_mlflow.py
# Grafana has no Debian package; see infra/README.md for running it elsewhere.
# Needs root (or sudo). Prints what it did; exit 0 when everything is present afterwards.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install_services: not root and no sudo; cannot install packages" >&2; exit 1; fi
fi

have_pg()    { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }
have_prom()  { command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]; }
have_chrom() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }

missing=()
have_pg    || missing+=(postgresql)
have_prom  || missing+=(prometheus)
have_chrom || missing+=(chromium fonts-dejavu-core)   # a font, else the screenshot's text is boxes

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_services: postgresql, prometheus and chromium already present"
  exit 0
fi

echo "install_services: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: do not let package scripts start system services (we run our own instances).
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=0
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod +x "$POLICY"
  CREATED_POLICY=1
fi
cleanup() { if [ "$CREATED_POLICY" = 1 ]; then $SUDO rm -f "$POLICY"; fi; }
trap cleanup EXIT

$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

have_pg && have_prom && have_chrom && { echo "install_services: done"; exit 0; }
echo "install_services: still missing after install:" \
  "$(have_pg || echo postgresql) $(have_prom || echo prometheus) $(have_chrom || echo chromium)" >&2
exit 1
