#!/usr/bin/env bash
# A simulation campaign over several processes (make campaign; docs/development.md).
#
#   STORE=mem|zk|pg|workflow SEED=N SCHEDULES=K PROCS=P [CHUNK=C] [NICE=N] scripts/campaign.sh
#
# STORE picks coord/protocol's TestSimulation (mem), TestSimulationZooKeeper
# (zk), TestSimulationPostgres (pg) or coord/workflow's TestWorkflowSimulation
# (workflow). The script builds the test binary once (-race; GOWORK from the
# environment: make campaign passes make sim's zk-overlay workspace), splits
# seeds SEED .. SEED+K-1 into chunks of C seeds (default 1000 for mem and
# workflow, 100 for zk and pg; each zk or pg chunk starts its own container)
# and runs them P at a time, each chunk a process of its own whose log goes
# to the campaign's directory (CAMPAIGN_DIR, default
# .build/campaign-STORE-SEED-TIME), printed first. A chunk logs a progress
# line every 100 schedules and a summary at its end; the script prints a
# line as each chunk ends, then the totals: schedules run, violations, every
# failing seed with its first error line, and the chunks that ended without
# a summary. Exit status 1 when anything failed. NICE=N runs the chunks
# under nice -n N (default 0). SIM_MONITORED, SIM_ZK_WORKERS,
# SIM_FAILOVER_CLAIMS and the SHARDFLOW_* variables pass through.
set -euo pipefail

store=${STORE:-mem}
seed=${SEED:-$(( $(date +%s%N) % 1000000000 ))}
schedules=${SCHEDULES:-1000}
procs=${PROCS:-1}
chunk=${CHUNK:-}
go=${GO:-go}

simstore=$store
case $store in
mem) pkg=./coord/protocol run='^TestSimulation$' ;;
zk) pkg=./coord/protocol run='^TestSimulationZooKeeper$' ;;
pg) pkg=./coord/protocol run='^TestSimulationPostgres$' ;;
workflow) pkg=./coord/workflow run='^TestWorkflowSimulation$' simstore=mem ;;
*) echo "campaign: STORE=$store: want mem, zk, pg or workflow" >&2; exit 2 ;;
esac
for v in seed schedules procs; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "campaign: ${v^^}=${!v}: want a number" >&2; exit 2; }
done
(( schedules > 0 && procs > 0 )) || { echo "campaign: SCHEDULES and PROCS must be positive" >&2; exit 2; }
if [[ -z $chunk ]]; then
	case $store in mem | workflow) chunk=1000 ;; *) chunk=100 ;; esac
fi
[[ $chunk =~ ^[1-9][0-9]*$ ]] || { echo "campaign: CHUNK=$chunk: want a positive number" >&2; exit 2; }

dir=${CAMPAIGN_DIR:-.build/campaign-$store-$seed-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
echo "[campaign] $store seeds $seed..$((seed + schedules - 1)) in chunks of $chunk, $procs at a time; logs in $dir"
echo "[campaign] commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(uptime | sed 's/.*load/load/')"

bin=$dir/sim.test
"$go" test -race -c -o "$bin" "$pkg"
echo "[campaign] built $bin"

started=$(date +%s)
nchunks=$(( (schedules + chunk - 1) / chunk ))
# runchunk FIRST COUNT: one process, its log, a line when it ends.
runchunk() {
	local first=$1 count=$2 log=$dir/chunk-$1.log rc=0
	# In the package's directory, as go test runs it.
	(cd "$pkg" && SIM_SEED=$first SIM_SCHEDULES=$count SIM_STORE=$simstore \
		nice -n "${NICE:-0}" "$bin" -test.run "$run" -test.v -test.count=1 -test.timeout 0) >"$log" 2>&1 || rc=$?
	echo "$rc" >"$log.rc"
	local summary
	summary=$(grep -E '^(workflow: )?schedules=' "$log" | tail -1 || true)
	echo "[campaign] chunk $first+$count rc=$rc ${summary:-NO SUMMARY} ($(ls "$dir"/*.rc | wc -l)/$nchunks chunks, $(( $(date +%s) - started ))s)"
}

for (( first = seed; first < seed + schedules; first += chunk )); do
	while (( $(jobs -rp | wc -l) >= procs )); do wait -n || true; done
	runchunk "$first" "$(( seed + schedules - first < chunk ? seed + schedules - first : chunk ))" &
done
wait

# Totals. A failing seed is one with a "violation: seed=N ..." line (the
# simulation prints it at once, with its first finding) or a failed subtest
# "--- FAIL: Test.../N" (a t.Fatal of the harness; the workflow simulation's
# findings); its first error line is the violation's, else the first
# "file.go:N:" line logged under that subtest.
runs=0 violations=0 nosummary=()
for log in "$dir"/chunk-*.log; do
	summary=$(grep -E '^(workflow: )?schedules=' "$log" | tail -1 || true)
	if [[ -z $summary ]]; then
		nosummary+=("$log: rc=$(cat "$log.rc" 2>/dev/null || echo '?'): $(grep -m1 -E '^(panic|FAIL|--- FAIL)|\.go:[0-9]+: ' "$log" || echo 'no output')")
		continue
	fi
	runs=$(( runs + $(sed -E 's/.*schedules=([0-9]+).*/\1/' <<<"$summary") ))
	violations=$(( violations + $(sed -E 's/.*violations=([0-9]+).*/\1/' <<<"$summary") ))
done
failing=$(awk '
	/^violation: seed=[0-9]+/ {
		s = $2; sub(/^seed=/, "", s); msg = $0; sub(/^violation: seed=[0-9]+ ?/, "", msg)
		if (!(s in first) || first[s] == "") first[s] = msg
		next
	}
	/^=== (RUN|NAME|CONT|PAUSE) +Test[A-Za-z]+\/[0-9]+/ { cur = $3; sub(/.*\//, "", cur); sub(/#.*/, "", cur); next }
	/^=== / { cur = ""; next }
	/^ *--- FAIL: Test[A-Za-z]+\/[0-9]+/ {
		s = $3; sub(/.*\//, "", s); sub(/#.*/, "", s); if (!(s in first)) first[s] = ""; failsub = s; next
	}
	/\.go:[0-9]+: / {
		line = $0; sub(/^ +/, "", line)
		if (failsub != "" && first[failsub] == "") first[failsub] = line
		if (cur != "" && !(cur in logged)) logged[cur] = line
		failsub = ""; next
	}
	{ failsub = "" }
	END {
		for (s in first) {
			msg = first[s]
			if ((msg == "" || msg ~ /^harness t\.Fatal/) && (s in logged)) msg = logged[s]
			print s "\t" (msg == "" ? "(no error line; see the log)" : msg)
		}
	}' "$dir"/chunk-*.log | sort -n)

echo "[campaign] $store: schedules=$runs violations=$violations seed=$seed chunks=$nchunks in $(( $(date +%s) - started ))s; logs in $dir"
if [[ -n $failing ]]; then
	replay="make sim STORE=$store SEED=N SCHEDULES=1"
	[[ $store == workflow ]] && replay="SIM_SEED=N SIM_SCHEDULES=1 go test -race -run TestWorkflowSimulation ./coord/workflow"
	echo "[campaign] failing seeds (replay: $replay; the chunk's log has every finding):"
	while IFS=$'\t' read -r s msg; do
		printf '  %s  %s  (%s)\n' "$s" "${msg:0:300}" "$(grep -lE "violation: seed=$s( |$)|--- FAIL: Test[A-Za-z]+/$s " "$dir"/chunk-*.log | head -1 | xargs -r basename)"
	done <<<"$failing"
fi
for n in ${nosummary[@]+"${nosummary[@]}"}; do echo "[campaign] chunk without a summary: $n"; done
rc=0
(( violations == 0 )) && [[ -z $failing && ${#nosummary[@]} -eq 0 ]] || rc=1
for f in "$dir"/*.rc; do [[ $(cat "$f") == 0 ]] || rc=1; done
exit $rc
