#!/usr/bin/env bash
# make bench-jobs BASELINE=rev [ROUNDS=n]: TestScaleJobs (dataflow) built
# from git revision rev and from this tree, run one after the other, old
# then new, ROUNDS times (default 1), so that both see the same load: on a
# shared machine a lone figure follows the load, a ratio of neighbours much
# less. Every JOBS line is prefixed with its build (old@rev or new). The
# SHARDFLOW_SCALE_* settings come from the environment (the Makefile's).
set -euo pipefail
rev=${1:?usage: bench-jobs-ab.sh REV [ROUNDS]}
rounds=${2:-1}
root=$(git rev-parse --show-toplevel)
short=$(git -C "$root" rev-parse --short "$rev")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/old"
git -C "$root" archive "$rev" | tar -x -C "$tmp/old"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./dataflow)
(cd "$root" && go test -c -o "$tmp/new.test" ./dataflow)
for r in $(seq "$rounds"); do
	for v in old new; do
		dir=$root/dataflow label=new
		if [ "$v" = old ]; then
			dir=$tmp/old/dataflow label=old@$short
		fi
		echo "round $r: $label"
		(cd "$dir" && "$tmp/$v.test" -test.count=1 -test.timeout 20m -test.run '^TestScaleJobs$' -test.v) |
			grep -E 'JOBS|^(---|ok|FAIL|PASS)' | sed "s/^/$label /"
	done
done
