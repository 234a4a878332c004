package protocol_test

import (
	"testing"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/integration"
)

// TestProtocolPostgres runs the protocol suite on a real Postgres server
// (coord/pgstore; the integration harness's shared container, or
// SHARDFLOW_PG), every session behind its own proxy so that faults hit one
// simulated process. Sessions are as long as on ZooKeeper, and for the same
// reason: only the suite's own faults end them (EndSessions).
func TestProtocolPostgres(t *testing.T) {
	pg := integration.SharedPostgres(t)
	coordtest.Run(t, coordtest.Postgres(t, coordtest.PostgresConfig{DSN: pg.DSN(), SessionTimeout: protocolZKSession, EndSessions: true}))
}
