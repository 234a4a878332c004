// Package faults holds shardflow's multi-process fault suites: worker
// processes (integration/testworker) sharing jobs over real ZooKeeper while
// the tests kill them (SIGKILL), stop them (SIGTERM), freeze them (SIGSTOP),
// cut their connections (a TCP proxy), and stop ZooKeeper servers; after each
// fault the suites check the invariants of the protocol from the workers'
// event streams, from coord.Admin status and from the workers' fenced
// ledger (each processed tick is committed to a ZooKeeper ledger that
// refuses a write whose fencing epoch is lower than one already accepted):
//
//   - disjoint ownership: the sharding lists of live servers are disjoint and
//     together exactly 0..n-1;
//   - no item lost: every item is begun again after each fault;
//   - no stale commit: in the ledger, no commit of an item is accepted after
//     a commit with a larger epoch, and no epoch is committed by two servers;
//     no fencing check passes when it started after another server began
//     the item with a larger epoch;
//   - liveness: a crashed server's items run again on a live server within a
//     generous bound (a hang fails; speed is measured, not asserted).
//
// The package has tests only; run them with
//
//	TESTCONTAINERS_RYUK_DISABLED=true SHARDFLOW_ZK_IMAGE=shardflow-local/zookeeper:3.8 \
//	    go test -race -count=1 ./integration/faults/
//
// Environment: SHARDFLOW_ZK_DOWN (a duration, default 30s) is how long the
// ZooKeeper-down test keeps the server stopped; SHARDFLOW_BENCH_OUT, when
// set, is a directory where the failover tests write their latency figures
// (failover-busy.txt, failover-idle.txt); SHARDFLOW_FAILOVER_KILLS (default
// 10) is how many workers each of them kills. The
// integration package's variables (SHARDFLOW_ZK, SHARDFLOW_REQUIRE_DOCKER,
// ...) apply as documented there.
package faults
