package jobconfig_test

import (
	"fmt"

	"github.com/shardflow/shardflow/coord/jobconfig"
)

func ExampleConfig_Validate() {
	cfg := jobconfig.Config{
		JobName:                "order-sync",
		Cron:                   "0 15 10 ? * MON-FRI",
		ShardingTotalCount:     2,
		ShardingItemParameters: "0=Beijing,2=Shanghai",
	}
	fmt.Println(cfg.Validate())
	// Output:
	// jobconfig: shardingItemParameters: pair "2=Shanghai": item 2 is not below shardingTotalCount 2; write comma-separated item=value pairs with items 0..shardingTotalCount-1, e.g. "0=Beijing,1=Shanghai,2=Guangzhou", or raise shardingTotalCount
}

func ExampleParseItemParameters() {
	m, err := jobconfig.ParseItemParameters("0=Beijing, 1=Shanghai, 2=", 3)
	fmt.Println(m, err)
	// Output:
	// map[0:Beijing 1:Shanghai 2:] <nil>
}

func ExampleSetField() {
	cfg := jobconfig.Config{JobName: "order-sync", ShardingTotalCount: 4}
	cfg, err := jobconfig.SetField(cfg, "shardingTotalCount", "8")
	fmt.Println(cfg.ShardingTotalCount, err)
	_, err = jobconfig.SetField(cfg, "failover", "maybe")
	fmt.Println(err)
	// Output:
	// 8 <nil>
	// jobconfig: failover: "maybe" is not true or false; give a value such as true
}
