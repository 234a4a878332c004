package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
)

// Ensemble is a ZooKeeper ensemble: containers on a private Docker network
// owned by the test, or the servers named by SHARDFLOW_ZK. Methods are safe
// for concurrent use on different members.
type Ensemble struct {
	members []*ZooKeeper
	servers []string
}

// StartEnsemble starts n ZooKeeper servers (3 for a real quorum) on a private
// Docker network created for the test, under the aliases zk1..zkN, and returns
// once every member serves as leader or follower (`srvr`). Containers and the
// network are removed in t.Cleanup. With SHARDFLOW_ZK set it starts nothing:
// the ensemble has one uncontrollable member holding all named servers. Docker
// missing skips the test unless SHARDFLOW_REQUIRE_DOCKER is set.
func StartEnsemble(t testing.TB, n int, opts ...Option) *Ensemble {
	t.Helper()
	if n < 1 {
		t.Fatalf("integration: StartEnsemble needs n >= 1 members, got %d", n)
	}
	if z := zkFromEnv(); z != nil {
		return &Ensemble{members: []*ZooKeeper{z}, servers: z.Servers()}
	}
	requireDocker(t, "a ZooKeeper ensemble", envZooKeeper)
	cfg := newZKConfig(opts)

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(map[string]string{containerLabel: "true"}))
	// Registered before the containers' cleanups, so it runs after them.
	testcontainers.CleanupNetwork(t, nw)
	if err != nil {
		t.Fatalf("integration: create the ensemble's Docker network: %v", err)
	}

	var zooServers []string
	for i := 1; i <= n; i++ {
		zooServers = append(zooServers, fmt.Sprintf("server.%d=zk%d:2888:3888;2181", i, i))
	}
	e := &Ensemble{}
	for i := 1; i <= n; i++ {
		z, err := startZKContainer(t, cfg, false, nw, i, strings.Join(zooServers, " "))
		if err != nil {
			t.Fatal(err)
		}
		e.members = append(e.members, z)
		e.servers = append(e.servers, z.servers[0])
	}
	for _, z := range e.members {
		wait := waitServing
		if n == 1 {
			wait = waitRuok
		}
		if err := wait(ctx, z.servers[0]); err != nil {
			t.Fatalf("integration: ensemble member %s (%s) did not serve: %v\n%s", z.name, z.servers[0], err, containerLogs(z.ctr))
		}
	}
	return e
}

// Servers returns every member's client address (host:port) reachable from
// the host, in member order; a connect string is strings.Join(Servers(), ",").
func (e *Ensemble) Servers() []string { return append([]string(nil), e.servers...) }

// Size returns the number of members.
func (e *Ensemble) Size() int { return len(e.members) }

// Member returns member i (0-based). It panics when i is out of range.
func (e *Ensemble) Member(i int) *ZooKeeper { return e.members[i] }

// Controllable reports whether the harness owns the members.
func (e *Ensemble) Controllable() bool { return e.members[0].Controllable() }

// RequireControl skips the test, saying why, when the ensemble comes from
// SHARDFLOW_ZK.
func (e *Ensemble) RequireControl(t testing.TB) {
	t.Helper()
	if !e.Controllable() {
		t.Skipf("integration: this test stops ensemble members, but the servers come from %s=%s; unset it to run against containers", envZooKeeper, os.Getenv(envZooKeeper))
	}
}

// StopMember stops member i (0-based), keeping its data; see [ZooKeeper.Stop].
func (e *Ensemble) StopMember(ctx context.Context, i int) error {
	if i < 0 || i >= len(e.members) {
		return fmt.Errorf("integration: StopMember(%d): the ensemble has members 0..%d", i, len(e.members)-1)
	}
	return e.members[i].Stop(ctx)
}

// StartMember starts member i (0-based) again and blocks until it serves as
// leader or follower, which needs a quorum of the other members up; see
// [ZooKeeper.Start].
func (e *Ensemble) StartMember(ctx context.Context, i int) error {
	if i < 0 || i >= len(e.members) {
		return fmt.Errorf("integration: StartMember(%d): the ensemble has members 0..%d", i, len(e.members)-1)
	}
	return e.members[i].Start(ctx)
}
