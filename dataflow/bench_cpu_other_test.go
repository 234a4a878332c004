//go:build !unix

package dataflow

import "time"

// processCPU is not read on this platform: the benchmarks report no CPU
// time ratios.
func processCPU() time.Duration { return 0 }
