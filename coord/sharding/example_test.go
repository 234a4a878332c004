package sharding_test

import (
	"fmt"

	"github.com/shardflow/shardflow/coord/sharding"
)

func ExampleAverage() {
	got := sharding.Average.Shard([]string{"10.0.0.3", "10.0.0.1", "10.0.0.2"}, "order-sync", 8)
	for _, s := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		fmt.Println(s, got[s])
	}
	// Output:
	// 10.0.0.1 [0 1 6]
	// 10.0.0.2 [2 3 7]
	// 10.0.0.3 [4 5]
}

func ExampleLookup() {
	s, err := sharding.Lookup("round-robin")
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Shard([]string{"a", "b", "c"}, "hello", 3))
	_, err = sharding.Lookup("random")
	fmt.Println(err)
	// Output:
	// map[a:[2] b:[0] c:[1]]
	// sharding: unknown jobShardingStrategy; use a built-in name or register the strategy with sharding.Register before starting the job: jobShardingStrategy "random" is not one of average, odd-even, round-robin
}
