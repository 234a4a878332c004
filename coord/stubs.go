package coord

// Temporary stubs so the contract compiles; replaced by the implementation.

import (
	"context"
	"errors"
	"time"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

var errUnimplemented = errors.New("coord: not implemented yet")

type registry struct{}

func newRegistry(store.Store, RegistryConfig) (*registry, error) { return nil, errUnimplemented }
func (*registry) serverID() string                               { return "" }
func (*registry) join(context.Context, jobconfig.Config) (*Job, error) {
	return nil, errUnimplemented
}
func (*registry) close(context.Context) error { return errUnimplemented }

type job struct{}

func (*job) name() string                                        { return "" }
func (*job) config() jobconfig.Config                            { return jobconfig.Config{} }
func (*job) signals() <-chan Signal                              { return nil }
func (*job) begin(context.Context, time.Time) (*run, error)      { return nil, errUnimplemented }
func (*job) takeMisfire(context.Context) (bool, error)           { return false, errUnimplemented }
func (*job) claimFailover(context.Context) (bool, error)         { return false, errUnimplemented }
func (*job) recordNextFireTime(context.Context, time.Time) error { return errUnimplemented }
func (*job) reportCounts(context.Context, int64, int64) error    { return errUnimplemented }
func (*job) once(context.Context, string, []int, time.Duration, func(context.Context) error) error {
	return errUnimplemented
}
func (*job) lost() <-chan struct{}       { return nil }
func (*job) leave(context.Context) error { return errUnimplemented }

type run struct{}

func (*run) shards() []Assignment                      { return nil }
func (*run) context() context.Context                  { return context.Background() }
func (*run) keepGoing() bool                           { return false }
func (*run) checkOwnership(context.Context, int) error { return errUnimplemented }
func (*run) complete(context.Context, time.Time) error { return errUnimplemented }

type admin struct{}

func newAdmin(store.Store, string) *admin             { return &admin{} }
func (*admin) jobs(context.Context) ([]string, error) { return nil, errUnimplemented }
func (*admin) status(context.Context, string) (JobStatus, error) {
	return JobStatus{}, errUnimplemented
}
func (*admin) trigger(context.Context, string) error { return errUnimplemented }
func (*admin) setServerFlag(context.Context, string, string, string, bool) error {
	return errUnimplemented
}
func (*admin) setItemDisabled(context.Context, string, int, bool) error { return errUnimplemented }
func (*admin) shutdown(context.Context, string, string) error           { return errUnimplemented }
func (*admin) remove(context.Context, string, string) error             { return errUnimplemented }
func (*admin) getConfig(context.Context, string) (jobconfig.Config, error) {
	return jobconfig.Config{}, errUnimplemented
}
func (*admin) setConfig(context.Context, string, string, string) error { return errUnimplemented }
