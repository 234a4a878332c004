package integration

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// restartable is the stop/start half of a harness server: a container that
// can be stopped and started again with its data on the same host port. It
// is embedded by ZooKeeper and Postgres; a server named by the environment
// has no container and refuses with ErrNotControllable.
type restartable struct {
	mu      sync.Mutex
	ctr     *testcontainers.DockerContainer // nil when named by the environment
	running bool
}

// stop stops the container (SIGTERM, SIGKILL after 10 s) and keeps its data.
// Stopping a stopped server is a no-op. what names the server in errors.
func (r *restartable) stop(ctx context.Context, what string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctr == nil {
		return ErrNotControllable
	}
	if !r.running {
		return nil
	}
	timeout := 10 * time.Second
	if err := r.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("integration: stop %s: %w", what, err)
	}
	r.running = false
	return nil
}

// start starts a stopped container again, then waits with ready (also for
// a server that was running) until it serves or ctx ends.
func (r *restartable) start(ctx context.Context, what string, ready func(context.Context) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctr == nil {
		return ErrNotControllable
	}
	if !r.running {
		if err := r.ctr.Start(ctx); err != nil {
			return fmt.Errorf("integration: start %s again: %w", what, err)
		}
		r.running = true
	}
	if err := ready(ctx); err != nil {
		return fmt.Errorf("integration: %s did not come back: %w", what, err)
	}
	return nil
}
