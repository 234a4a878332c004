package main

import (
	"context"
	"errors"
)

// runWork is wired to dataflow.Node and zkstore once they land.
func runWork(ctx context.Context, args []string) error {
	return errors.New("work: not available yet in this build: it needs dataflow.Node")
}
