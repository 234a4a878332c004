#!/usr/bin/env bash
# Runs docs/quickstart.md word for word: its sh blocks, in order, in one
# bash, from the repository root. The official images it names are
# replaced by the local ones (SHARDFLOW_ZK_IMAGE, SHARDFLOW_PG_IMAGE) on a
# machine without a registry. Then it checks that every invoice was
# settled once and that status, history and the API answered.
set -euo pipefail
cd "$(dirname "$0")/.."
zk_image=${SHARDFLOW_ZK_IMAGE:-zookeeper:3.9}
pg_image=${SHARDFLOW_PG_IMAGE:-postgres:16}
for name in shardflow-zk shardflow-pg; do
  if docker container inspect "$name" >/dev/null 2>&1; then
    echo "quickstart: a container named $name exists; remove it first (docker rm -f $name)" >&2
    exit 1
  fi
done
script=$(awk '/^```sh$/ {on = 1; next} /^```$/ {on = 0} on' docs/quickstart.md)
script=${script//zookeeper:3.9/$zk_image}
script=${script//postgres:16/$pg_image}
# The doc's own commands, then the checks, before its clean-up block runs.
cleanup=$(awk '/^## 6\. Clean up/ {on = 1} on && /^```sh$/ {grab = 1; next} grab && /^```$/ {exit} grab' docs/quickstart.md)
body=${script%"$cleanup"}
if [[ $body == "$script" ]]; then
  echo "quickstart: could not find the clean-up block of docs/quickstart.md" >&2
  exit 1
fi
checks='
settled=$(docker exec shardflow-pg psql -U postgres -tAc "SELECT count(*) FROM invoices WHERE settled_at IS NOT NULL AND shardflow_status = '"'"'done'"'"'")
[ "$settled" = 100000 ] || { echo "quickstart: $settled of 100000 invoices settled and done" >&2; exit 1; }
# Whole outputs first: grep -q ending early would SIGPIPE the writer (pipefail).
status=$($QS/shardflow status --job settle-invoices)
grep -q "^job settle-invoices   health ok" <<<"$status"
runs=$($QS/shardflow history --job settle-invoices --json --limit 1)
grep -q "\"job\": \"settle-invoices\"" <<<"$runs"
jobs=$(curl -s http://127.0.0.1:8899/api/v1/jobs)
grep -q "\"totalSuccessCount\": 100000" <<<"$jobs"
echo "quickstart: every invoice settled; status, history and the API answered"
'
# On a failure: stop what the doc started, and remove its containers.
onfail='trap '"'"'kill $(jobs -p) 2>/dev/null; docker rm -f shardflow-zk shardflow-pg >/dev/null 2>&1'"'"' ERR'
bash -euxo pipefail -c "$onfail"$'\n'"$body"$'\n'"$checks"$'\n'"$cleanup"
