package sharding

import (
	"slices"
)

// Strategy assigns the shard items 0..total-1 of job to servers.
//
// Implementations must be pure and deterministic, and safe for concurrent
// use. The result has one entry per distinct server (an empty, non-nil slice
// for a server that gets nothing), each slice sorted ascending, and every
// item in exactly one slice. With no servers the result is empty; with
// total <= 0 every server gets an empty slice. The servers slice is not
// modified.
type Strategy interface {
	Shard(servers []string, job string, total int) map[string][]int
}

// StrategyFunc adapts a function to Strategy.
type StrategyFunc func(servers []string, job string, total int) map[string][]int

// Shard calls f.
func (f StrategyFunc) Shard(servers []string, job string, total int) map[string][]int {
	return f(servers, job, total)
}

// Built-in strategies. Each sorts and de-duplicates the server ids first, so
// the order in which servers are listed never matters.
var (
	// Average is ElasticJob's AverageAllocationJobShardingStrategy.
	Average Strategy = StrategyFunc(average)
	// OddEven is ElasticJob's OdevitySortByNameJobShardingStrategy: the
	// server order is reversed when the job name's hashCode is even, so
	// jobs spread their remainder items over different servers.
	OddEven Strategy = StrategyFunc(oddEven)
	// RoundRobin is ElasticJob's RotateServerByNameJobShardingStrategy: the
	// server order is rotated by the job name's hashCode.
	RoundRobin Strategy = StrategyFunc(roundRobin)
)

func average(servers []string, _ string, total int) map[string][]int {
	return averageOrdered(SortedServers(servers), total)
}

// averageOrdered shares total items over servers in the given order (no
// sorting, no duplicates expected): q = total/n each in ranges, then the
// remainder one each to servers 0, 1, ...
func averageOrdered(servers []string, total int) map[string][]int {
	n := len(servers)
	result := make(map[string][]int, n)
	if n == 0 {
		return result
	}
	if total < 0 {
		total = 0
	}
	q, rem := total/n, total%n
	for k, s := range servers {
		size := q
		if k < rem {
			size++
		}
		items := make([]int, 0, size)
		for i := k * q; i < (k+1)*q; i++ {
			items = append(items, i)
		}
		if k < rem {
			// Remainder items are all above every ranged item, so the
			// slice stays sorted.
			items = append(items, q*n+k)
		}
		result[s] = items
	}
	return result
}

func oddEven(servers []string, job string, total int) map[string][]int {
	sorted := SortedServers(servers)
	// Java's % keeps the dividend's sign, as Go's does: a negative odd hash
	// gives -1, which counts as odd.
	if JavaStringHashCode(job)%2 == 0 {
		slices.Reverse(sorted)
	}
	return averageOrdered(sorted, total)
}

func roundRobin(servers []string, job string, total int) map[string][]int {
	sorted := SortedServers(servers)
	if n := len(sorted); n > 0 {
		if off := roundRobinOffset(job, n); off > 0 {
			sorted = slices.Concat(sorted[off:], sorted[:off])
		}
	}
	return averageOrdered(sorted, total)
}

// roundRobinOffset is Java's Math.abs(jobName.hashCode()) % n.
//
// Java's Math.abs(Integer.MIN_VALUE) is Integer.MIN_VALUE, so for a job name
// whose hashCode is MIN_VALUE (for example "polygenelubricants") the offset
// is negative unless n is a power of two; ElasticJob then indexes its server
// list with a negative number and the sharding throws. shardflow treats that
// case as offset 0: no rotation, which is plain average allocation.
func roundRobinOffset(job string, n int) int {
	h := JavaStringHashCode(job)
	if h < 0 {
		h = -h // -MinInt32 overflows back to MinInt32, as in Java.
	}
	off := int(h) % n
	if off < 0 {
		return 0
	}
	return off
}
