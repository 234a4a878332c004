package testsignal

// nodeHook sets the coordination signals of a dataflow.NodeConfig, which
// keeps them in an unexported field; package dataflow registers it.
var nodeHook func(cfg any, sig *Coord) any

// RegisterNodeHook is called by package dataflow (in init) with the
// function that sets a NodeConfig's signals.
func RegisterNodeHook(hook func(cfg any, sig *Coord) any) { nodeHook = hook }

// WithNodeSignals returns cfg, a dataflow.NodeConfig, with sig as the
// signals of its Node's coordination: shardflow's tests in other packages
// than dataflow use it, since the setting is not part of dataflow's API.
func WithNodeSignals[C any](cfg C, sig *Coord) C {
	return nodeHook(cfg, sig).(C)
}
