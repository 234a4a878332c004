#!/usr/bin/env bash
# build-images.sh builds the local container images the integration tests use,
# without any container registry:
#
#   shardflow-local/zookeeper:3.8  Debian's ZooKeeper 3.8 jars on a headless JRE 17
#   shardflow-local/postgres:15    Debian's PostgreSQL 15 server
#
# Both images are imported from ONE Debian bookworm rootfs made by debootstrap from
# the mirror named in this machine's own apt sources, so the build downloads each
# package once and Docker stores the rootfs as one shared layer. Each image differs
# only in its entrypoint, which honours the environment variables of the official
# zookeeper and postgres images that the integration harness sets, and, like the
# official images, each declares its data directories as volumes: a container's
# writes then go to a Docker volume on the host's file system, not through the
# storage driver (fuse-overlayfs on this project's machines, where ZooKeeper's
# synced transaction log cost 25-30% of a 10,000-job start; docs/benchmarks.md).
#
# Idempotent: an image whose tag `docker image inspect` already finds, with those
# volumes, is skipped; when both exist nothing is downloaded. An image without
# them (built before they were declared) is rebuilt. Set SHARDFLOW_REBUILD_IMAGES=1
# to rebuild anyway.
#
# Environment:
#   SHARDFLOW_IMAGE_WORKDIR  scratch directory (default /var/tmp/shardflow-images);
#                            removed after a successful build.
#   SHARDFLOW_DEBIAN_MIRROR  override the mirror read from the apt sources.
#   SHARDFLOW_BUILD_ZK_TAG, SHARDFLOW_BUILD_PG_TAG
#                            the tags to build (defaults above): with another
#                            workdir, a build can be timed beside the images
#                            in use without removing them.
set -euo pipefail

ZK_TAG=${SHARDFLOW_BUILD_ZK_TAG:-shardflow-local/zookeeper:3.8}
PG_TAG=${SHARDFLOW_BUILD_PG_TAG:-shardflow-local/postgres:15}
SUITE=bookworm
WORKDIR=${SHARDFLOW_IMAGE_WORKDIR:-/var/tmp/shardflow-images}
ROOTFS=$WORKDIR/rootfs
START=$(date +%s)

log() { printf '[build-images %3ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() { printf 'build-images: %s\n' "$*" >&2; exit 1; }

SUDO=
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi

command -v docker >/dev/null || die "docker not found: install the Docker engine (apt-get install docker.io) and start it"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (docker info failed): start it (systemctl start docker) or check DOCKER_HOST"

# The data volumes each image declares, as the official images do.
ZK_VOLUMES=(/data /datalog)
PG_VOLUMES=(/var/lib/postgresql/data)
volumes_json() { printf '[%s]' "$(printf '"%s"\n' "$@" | paste -sd, -)"; }
# has_volumes TAG VOLUME...: the image exists and declares every VOLUME.
has_volumes() {
  local tag=$1 got v
  shift
  got=" $(docker image inspect -f '{{range $k, $v := .Config.Volumes}}{{$k}} {{end}}' "$tag" 2>/dev/null)" || return 1
  for v in "$@"; do [[ $got == *" $v "* ]] || return 1; done
}

need=()
for tag in "$ZK_TAG" "$PG_TAG"; do
  if [[ $tag == "$ZK_TAG" ]]; then vols=("${ZK_VOLUMES[@]}"); else vols=("${PG_VOLUMES[@]}"); fi
  if [[ -z ${SHARDFLOW_REBUILD_IMAGES:-} ]] && has_volumes "$tag" "${vols[@]}"; then
    log "$tag present, skipping"
  else
    if docker image inspect "$tag" >/dev/null 2>&1; then
      log "$tag predates its data volumes (${vols[*]}): rebuilding"
    fi
    need+=("$tag")
  fi
done
if [[ ${#need[@]} -eq 0 ]]; then
  exit 0
fi
command -v debootstrap >/dev/null || die "debootstrap not found: run scripts/setup.sh (or apt-get install debootstrap)"

# mirror prints the Debian mirror URI of this machine's apt sources (deb822 first,
# then one-line format), skipping security and non-Debian entries. With none, it
# fails naming the files it read: the script never falls back to a host of its own.
mirror() {
  if [[ -n ${SHARDFLOW_DEBIAN_MIRROR:-} ]]; then echo "$SHARDFLOW_DEBIAN_MIRROR"; return; fi
  local f uri looked=()
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    looked+=("$f")
    # A deb822 stanza: take URIs from a stanza whose Suites name the release.
    uri=$(awk -v suite="$SUITE" '
      BEGIN { RS=""; FS="\n" }
      {
        u=""; s=""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/)   { u=$i; sub(/^URIs:[ \t]*/, "", u) }
          if ($i ~ /^Suites:/) { s=$i }
        }
        if (u != "" && s ~ ("[ \t]" suite "([ \t]|$)") && u !~ /security/) { split(u, a, " "); print a[1]; exit }
      }' "$f")
    if [[ -n $uri ]]; then echo "$uri"; return; fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $f ]] || continue
    looked+=("$f")
    uri=$(awk -v suite="$SUITE" '$1 == "deb" && $0 !~ /security/ {
        for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i ~ /:\/\//) { if ($(i+1) == suite) { print $i; exit } } }' "$f")
    if [[ -n $uri ]]; then echo "$uri"; return; fi
  done
  local where="none of /etc/apt/sources.list, /etc/apt/sources.list.d/*.sources, /etc/apt/sources.list.d/*.list exists or is readable"
  if [[ ${#looked[@]} -gt 0 ]]; then where="looked in ${looked[*]}"; fi
  die "no Debian mirror for $SUITE in this machine's apt sources ($where).
Set SHARDFLOW_DEBIAN_MIRROR to the URI of a Debian mirror that carries $SUITE, e.g.
  SHARDFLOW_DEBIAN_MIRROR=http://<your-mirror>/debian make setup"
}

MIRROR=$(mirror) || exit 1
log "mirror $MIRROR, workdir $WORKDIR"

mkdir -p "$WORKDIR"
# Jars of ZooKeeper (libzookeeper-java: the `zookeeper` package adds only init
# scripts and pulls a full desktop JRE), a headless JRE, and the PostgreSQL server.
PACKAGES=libzookeeper-java,openjdk-17-jre-headless,postgresql-15
# A rootfs left by an interrupted run after debootstrap succeeded is reused.
if [[ -f $ROOTFS/.shardflow-rootfs-complete ]]; then
  log "reusing the rootfs in $ROOTFS"
else
$SUDO rm -rf "$ROOTFS"
log "debootstrap $SUITE with $PACKAGES (the longest step, about a minute and a half)"
# Its log gets the seconds since this script started on each line: where the
# time goes (downloading, unpacking, configuring) is then in the log.
stamp() { while IFS= read -r line; do printf '%4ss %s\n' "$(($(date +%s) - START))" "$line"; done; }
if ! $SUDO debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" 2>&1 | stamp >"$WORKDIR/debootstrap.log"; then
  tail -n 30 "$WORKDIR/debootstrap.log" >&2
  [[ -f $ROOTFS/debootstrap/debootstrap.log ]] && tail -n 30 "$ROOTFS/debootstrap/debootstrap.log" >&2
  die "debootstrap failed (log above and in $WORKDIR/debootstrap.log)"
fi
# Seconds of each phase, from the stamped log: resolving dependencies (CPU),
# downloading (network), unpacking and configuring (dpkg: CPU and disk).
phases=$(awk '
  /I: Checking component/ && !c { c = $1 + 0 }
  /I: Extracting/ && !x { x = $1 + 0 }
  END { if (c && x) printf "resolving %ds, downloading %ds, unpacking and configuring %ds", c, x - c, '"$(($(date +%s) - START))"' - x }
' "$WORKDIR/debootstrap.log")
log "debootstrap done, $($SUDO du -sh "$ROOTFS" | cut -f1)${phases:+ ($phases)}"

# Slim the rootfs: package caches, docs, the cluster Debian's postinst created.
$SUDO rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/* \
  "$ROOTFS"/var/lib/postgresql/15 "$ROOTFS"/etc/postgresql/15 "$ROOTFS"/debootstrap
$SUDO touch "$ROOTFS/.shardflow-rootfs-complete"
fi

$SUDO mkdir -p "$ROOTFS/usr/local/share/shardflow"
$SUDO tee "$ROOTFS/usr/local/share/shardflow/log4j.properties" >/dev/null <<'LOG4J'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} [myid:%X{myid}] - %-5p [%t:%C{1}@%L] - %m%n
LOG4J

# ZooKeeper entrypoint: the official image's variables (ZOO_MY_ID, ZOO_SERVERS,
# ZOO_TICK_TIME, ZOO_INIT_LIMIT, ZOO_SYNC_LIMIT, ZOO_MAX_CLIENT_CNXNS,
# ZOO_STANDALONE_ENABLED, ZOO_ADMINSERVER_ENABLED, ZOO_4LW_COMMANDS_WHITELIST,
# ZOO_CFG_EXTRA, JVMFLAGS), zoo.cfg in /conf, data in /data, logs on stdout.
$SUDO tee "$ROOTFS/usr/local/bin/zk-entrypoint" >/dev/null <<'ZKEP'
#!/bin/bash
set -euo pipefail
CONF_DIR=${ZOO_CONF_DIR:-/conf}
DATA_DIR=${ZOO_DATA_DIR:-/data}
DATA_LOG_DIR=${ZOO_DATA_LOG_DIR:-/datalog}
mkdir -p "$CONF_DIR" "$DATA_DIR" "$DATA_LOG_DIR"
if [[ ! -f $CONF_DIR/zoo.cfg ]]; then
  {
    echo "dataDir=$DATA_DIR"
    echo "dataLogDir=$DATA_LOG_DIR"
    echo "tickTime=${ZOO_TICK_TIME:-2000}"
    echo "initLimit=${ZOO_INIT_LIMIT:-5}"
    echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
    echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
    echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-0}"
    echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
    echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
    echo "admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-false}"
    echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}"
    echo "quorumListenOnAllIPs=true"
    for cfg in ${ZOO_CFG_EXTRA:-}; do echo "$cfg"; done
    for server in ${ZOO_SERVERS:-server.1=localhost:2888:3888;2181}; do echo "$server"; done
  } >"$CONF_DIR/zoo.cfg"
fi
[[ -f $DATA_DIR/myid ]] || echo "${ZOO_MY_ID:-1}" >"$DATA_DIR/myid"
CP=/usr/local/share/shardflow:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar
# shellcheck disable=SC2086 # JVMFLAGS is a list of flags, as in the official image.
exec java ${JVMFLAGS:--Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto} \
  -Dzookeeper.log.dir=/tmp -Dlog4j.configuration=file:/usr/local/share/shardflow/log4j.properties \
  -cp "$CP" org.apache.zookeeper.server.quorum.QuorumPeerMain "$CONF_DIR/zoo.cfg"
ZKEP

# PostgreSQL entrypoint: the official image's POSTGRES_USER (default postgres),
# POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust),
# POSTGRES_DB (default: the user), PGDATA; arguments are passed to postgres, with
# a leading "postgres" dropped, so `postgres -c fsync=off` works with both images.
$SUDO tee "$ROOTFS/usr/local/bin/pg-entrypoint" >/dev/null <<'PGEP'
#!/bin/bash
set -euo pipefail
export PGDATA=${PGDATA:-/var/lib/postgresql/data}
if [[ $(id -u) -eq 0 ]]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [[ ${1:-} == postgres ]]; then shift; fi
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
if [[ ! -s $PGDATA/PG_VERSION ]]; then
  if [[ -z ${POSTGRES_PASSWORD:-} && $auth != trust ]]; then
    echo "pg-entrypoint: POSTGRES_PASSWORD is not set: set it, or POSTGRES_HOST_AUTH_METHOD=trust" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:-postgres}" >"$pwfile"
  initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host="$auth" >/dev/null
  rm -f "$pwfile"
  echo "host all all all $auth" >>"$PGDATA/pg_hba.conf"
  if [[ $db != postgres ]]; then
    echo "CREATE DATABASE \"$db\"" | postgres --single -D "$PGDATA" -j postgres >/dev/null
  fi
  echo "pg-entrypoint: initialised $PGDATA (user $user, database $db)"
fi
# docker import cannot set STOPSIGNAL (the official image uses SIGINT): turn
# `docker stop`'s SIGTERM, a "smart" shutdown that waits for clients to leave,
# into Postgres' fast shutdown.
postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql "$@" &
pid=$!
trap 'kill -INT "$pid"' TERM INT
while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
wait "$pid"
PGEP
$SUDO chmod 755 "$ROOTFS/usr/local/bin/zk-entrypoint" "$ROOTFS/usr/local/bin/pg-entrypoint"

log "packing rootfs"
TARBALL=$WORKDIR/rootfs.tar
$SUDO tar --numeric-owner -C "$ROOTFS" -cf "$TARBALL" .
for tag in "${need[@]}"; do
  log "importing $tag"
  case $tag in
    "$ZK_TAG")
      docker import \
        -c 'ENTRYPOINT ["/usr/local/bin/zk-entrypoint"]' \
        -c 'ENV LANG=C.UTF-8 ZOO_CONF_DIR=/conf ZOO_DATA_DIR=/data ZOO_DATA_LOG_DIR=/datalog' \
        -c 'EXPOSE 2181 2888 3888' \
        -c "VOLUME $(volumes_json "${ZK_VOLUMES[@]}")" \
        -m "shardflow local ZooKeeper 3.8 (Debian bookworm), built by scripts/build-images.sh" \
        "$TARBALL" "$tag" >/dev/null
      ;;
    "$PG_TAG")
      docker import \
        -c 'ENTRYPOINT ["/usr/local/bin/pg-entrypoint"]' \
        -c 'CMD ["postgres"]' \
        -c 'ENV LANG=C.UTF-8 PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'EXPOSE 5432' \
        -c "VOLUME $(volumes_json "${PG_VOLUMES[@]}")" \
        -m "shardflow local PostgreSQL 15 (Debian bookworm), built by scripts/build-images.sh" \
        "$TARBALL" "$tag" >/dev/null
      ;;
  esac
done
$SUDO rm -rf "$WORKDIR"
log "done: ${need[*]} ($(docker image inspect -f '{{.Size}}' "${need[0]}" | awk '{printf "%d MB", $1/1e6}') each, one shared layer)"
