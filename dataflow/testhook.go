package dataflow

import "github.com/shardflow/shardflow/internal/testsignal"

// The hook through which shardflow's tests outside this package set a
// NodeConfig's coordination signals (testsignal.WithNodeSignals).
func init() {
	testsignal.RegisterNodeHook(func(cfg any, sig *testsignal.Coord) any {
		c := cfg.(NodeConfig)
		c.testSignals = sig
		return c
	})
}
