// Package integration is shardflow's test harness for real servers and real
// processes. Users may import it for their own suites.
//
// It starts ZooKeeper (one node with [StartZooKeeper], or an ensemble with
// [StartEnsemble]) and Postgres ([StartPostgres]) in containers through
// testcontainers-go, or uses existing servers named by the environment; it
// builds and runs worker processes that tests can kill, pause and resume
// ([BuildBinary], [StartProcess]), also from an earlier git revision for
// mixed-version fleets ([BuildBinaryAt]); and it cuts network paths with an
// in-process TCP proxy ([NewProxy]).
//
// # Environment
//
//   - SHARDFLOW_ZK: comma-separated host:port list of an existing ZooKeeper.
//     When set, no ZooKeeper container is started and the returned servers are
//     not controllable: tests that stop servers call RequireControl and skip.
//   - SHARDFLOW_PG: the DSN of an existing Postgres, likewise. The role needs
//     CREATEDB for [Postgres.NewDatabase].
//   - SHARDFLOW_ZK_IMAGE (default "zookeeper:3.9") and SHARDFLOW_PG_IMAGE
//     (default "postgres:16"): the images to run. On a machine without a
//     registry, `make images` builds shardflow-local/zookeeper:3.8 and
//     shardflow-local/postgres:15, which honour the official images' variables.
//   - SHARDFLOW_REQUIRE_DOCKER: when set to a non-empty value, a missing Docker
//     engine fails the test instead of skipping it (`make test` sets it, so CI
//     never passes by skipping).
//   - TESTCONTAINERS_RYUK_DISABLED=true: testcontainers reads it once per
//     process. Ryuk, its reaper, is itself an image to pull, so it must be
//     disabled where there is no registry; this harness removes every container
//     it starts in t.Cleanup (or in [Main] for shared ones) instead.
//     Containers carry the label org.shardflow.integration=true, so
//     leftovers of a killed test binary can be removed with
//     `make clean-containers`.
//
// # Lifecycle
//
// Everything a Start* or New* function creates is torn down by t.Cleanup of the
// test that created it: containers removed, processes killed and waited for,
// proxy goroutines stopped. [SharedZooKeeper] and [SharedPostgres] start one
// server per test binary; they are removed by [Main], which a package's TestMain
// calls and which also checks for leaked goroutines with goleak:
//
//	func TestMain(m *testing.M) { integration.Main(m) }
//
// Servers are reachable from the host on 127.0.0.1 at a fixed port chosen at
// start, kept across Stop and Start, so clients reconnect to the same address
// after a restart.
package integration
