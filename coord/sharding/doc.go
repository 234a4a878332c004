// Package sharding holds the strategies that split a job's shard items
// 0..total-1 over its live servers, as ElasticJob-Lite's
// JobShardingStrategy does, and the registry that names them for the
// jobShardingStrategy config field.
//
// Strategies are pure functions: the same servers, job name and total always
// give the same assignment on every server, which is what lets the leader's
// decision be previewed (shardflow shard preview) and table-tested.
//
// Built-in strategies, after ElasticJob-Lite 1.x, which sorts server ids
// ascending by Java's String.compareTo (UTF-16 code units, CompareServerIDs):
//
//   - "average" (Average): servers sorted; q = total/n; server k gets
//     [k*q, (k+1)*q); the remainder items go one each to servers 0, 1, ...
//     3 servers / 8 items: [0 1 6] [2 3 7] [4 5].
//   - "odd-even" (OddEven): if the Java String.hashCode of the job name is
//     even, the sorted server list is reversed; then average.
//   - "round-robin" (RoundRobin): the sorted list is rotated to start at
//     abs(hashCode(job)) % n; then average.
package sharding
