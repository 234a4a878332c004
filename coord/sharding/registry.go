package sharding

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Names of the built-in strategies, as written in the jobShardingStrategy
// config field.
const (
	NameAverage    = "average"
	NameOddEven    = "odd-even"
	NameRoundRobin = "round-robin"
)

// Sentinel errors of the registry.
var (
	// ErrUnknownStrategy: no strategy is registered under the name given in
	// the jobShardingStrategy config field.
	ErrUnknownStrategy = errors.New("sharding: unknown jobShardingStrategy; use a built-in name or register the strategy with sharding.Register before starting the job")
	// ErrDuplicateStrategy: a strategy is already registered under the name.
	ErrDuplicateStrategy = errors.New("sharding: a strategy is already registered under this name; choose another name")
	// ErrBadStrategy: Register was given an empty or malformed name or a nil strategy.
	ErrBadStrategy = errors.New("sharding: invalid strategy registration")
)

var (
	registryMu sync.RWMutex
	registered = map[string]Strategy{
		NameAverage:    Average,
		NameOddEven:    OddEven,
		NameRoundRobin: RoundRobin,
	}
)

// Register makes s available under name for the jobShardingStrategy config
// field. Every server of a job must register the same strategy under the
// same name before it joins the job, since whichever server leads does the
// sharding. Names are case-sensitive, non-empty and free of spaces, commas
// and slashes. Registering a taken name (the built-ins included) fails with
// ErrDuplicateStrategy. Safe for concurrent use.
func Register(name string, s Strategy) error {
	if name == "" || strings.ContainsAny(name, " \t\r\n,/") {
		return fmt.Errorf("%w: name %q must be non-empty without spaces, commas or slashes", ErrBadStrategy, name)
	}
	if s == nil {
		return fmt.Errorf("%w: strategy for %q is nil", ErrBadStrategy, name)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, ok := registered[name]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateStrategy, name)
	}
	registered[name] = s
	return nil
}

// Lookup returns the strategy registered under name. The empty name means
// the default, "average". An unknown name gives an error wrapping
// ErrUnknownStrategy that names the jobShardingStrategy field and lists the
// known names. Safe for concurrent use.
func Lookup(name string) (Strategy, error) {
	if name == "" {
		name = NameAverage
	}
	registryMu.RLock()
	s, ok := registered[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: jobShardingStrategy %q is not one of %s", ErrUnknownStrategy, name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Names returns the registered strategy names, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(registered))
}
