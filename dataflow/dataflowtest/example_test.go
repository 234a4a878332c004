package dataflowtest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/dataflow/dataflowtest"
)

// invoices is the job under test: each shard item holds two invoices of
// its region (the item parameter); a negative amount is refused.
type invoices struct{ amounts map[string][]int }

func (j invoices) Fetch(_ context.Context, s dataflow.Shard) ([]int, error) {
	return j.amounts[s.ItemParameter], nil
}

func (invoices) Process(_ context.Context, _ dataflow.Shard, cents int) error {
	if cents < 0 {
		return errors.New("negative amount")
	}
	return nil
}

// Run the job's three items once and check what each did.
func ExampleRun() {
	job := invoices{amounts: map[string][]int{"eu": {100, 250}, "us": {300, -1}, "apac": {50, 75}}}
	cfg := dataflow.JobConfig{JobName: "settle", ShardingTotalCount: 3, ShardingItemParameters: "0=eu,1=us,2=apac"}
	res, err := dataflowtest.Run(context.Background(), cfg, job)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d succeeded, %d failed\n", res.Success, res.Failure)
	for _, it := range res.Items {
		fmt.Printf("item %d: %d/%d, err %v\n", it.Item, it.Success, it.Failure, it.Err)
	}
	// Output:
	// 5 succeeded, 1 failed
	// item 0: 2/0, err <nil>
	// item 1: 1/1, err dataflow: job "settle" shard item 1: process: negative amount
	// item 2: 2/0, err <nil>
}

// A bad config is an error naming the field and the fix.
func ExampleRun_badConfig() {
	_, err := dataflowtest.Run(context.Background(), dataflow.JobConfig{JobName: "settle"}, invoices{})
	var fe *jobconfig.FieldError
	if errors.As(err, &fe) {
		fmt.Printf("%s: %s; %s\n", fe.Field, fe.Problem, fe.Fix)
	}
	// Output:
	// shardingTotalCount: must be > 0, got 0; set it to the number of shard items, e.g. 8
}
