#!/usr/bin/env bash
# setup.sh prepares a machine for `make test`, idempotently: it installs the
# Debian packages the tests need when they are missing (debootstrap, to build
# the images; chromium for the console's browser test; libquartz2-java for
# the Quartz cron comparison, with javac), then builds the
# local container images (scripts/build-images.sh), which needs no container
# registry. With SHARDFLOW_SETUP_HOST_SERVERS=1 it also installs zookeeper and the PostgreSQL
# server on the host, for local runs without containers (SHARDFLOW_ZK,
# SHARDFLOW_PG); the tests do not need them, and a fresh machine saves their
# download and install (a JRE among them).
# It uses sudo only when not run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
log() { printf '[setup] %s\n' "$*"; }

missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [[ -n ${SHARDFLOW_SETUP_HOST_SERVERS:-} ]]; then
  dpkg-query -W -f='${Status}' zookeeper 2>/dev/null | grep -q 'install ok installed' || missing+=(zookeeper)
  if ! command -v initdb >/dev/null && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
    missing+=(postgresql)
  fi
fi
# chromium: the console's browser test (cmd/shardflow, chromedp) drives it headless.
command -v chromium >/dev/null || missing+=(chromium)
# Quartz and a JDK for coord/jobconfig/quartz's differential test against
# Quartz's own CronExpression.
dpkg-query -W -f='${Status}' libquartz2-java 2>/dev/null | grep -q 'install ok installed' || missing+=(libquartz2-java)
command -v javac >/dev/null || missing+=(default-jdk-headless)

if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present"
fi

if ! command -v docker >/dev/null; then
  echo "setup: docker not found: install the Docker engine (apt-get install docker.io) and start it" >&2
  exit 1
fi
scripts/build-images.sh
