// Package demo is `shardflow demo`: K servers of one streaming dataflow job
// in one process, on the embedded store or a ZooKeeper ensemble, with a
// live progress view and a final table of who did what.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sinks/memsink"
	"github.com/shardflow/shardflow/sources/memory"
)

// demoOptions are the demo's flags.
type demoOptions struct {
	conn      cli.ConnFlags
	job       string
	servers   int
	records   int
	total     int
	work      time.Duration
	leaveAt   float64
	failEvery int
	deadline  time.Duration
	duration  time.Duration
	quiet     bool
}

// Run is `shardflow demo`: it runs K demo servers of one streaming dataflow job. On the embedded
// store (no --zk) they share one in-process source, one server leaves midway,
// and the demo ends by itself when every record is done. With --zk the
// servers join a job in ZooKeeper that other demo processes may share; each
// process then works its own generated copy of the data for the items it owns.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demoOptions
	fs := cli.NewFlagSet("demo", stderr)
	o.conn.Register(fs)
	fs.Lookup("zk").Usage = "ZooKeeper servers host:port,... (default: the embedded in-process store)"
	fs.Lookup("coord").Usage = "ZooKeeper servers host:port,... or a postgres:// URL (default: the embedded in-process store)"
	o.conn.ZK, o.conn.Coord = "", "" // the demo is embedded unless --coord or --zk is given; $SHARDFLOW_COORD and $SHARDFLOW_ZK do not apply
	fs.StringVar(&o.job, "job", "demo", "job name")
	fs.IntVar(&o.servers, "servers", 3, "servers to run in this process")
	fs.IntVar(&o.records, "records", 240_000, "records to generate")
	fs.IntVar(&o.total, "total", 8, "shardingTotalCount")
	fs.DurationVar(&o.work, "work", 1500*time.Microsecond, "simulated work per record")
	fs.Float64Var(&o.leaveAt, "leave-at", 0.4, "fraction of records done when the last server leaves (0: never)")
	fs.IntVar(&o.failEvery, "fail-every", 1000, "every Nth record fails on purpose, to show failure counts (0: none)")
	fs.DurationVar(&o.deadline, "deadline", 55*time.Second, "embedded store: give up (exit 1) if the work is not done by then")
	fs.DurationVar(&o.duration, "duration", 0, "with --zk: run this long, then print the table and exit 0 (default: until interrupted)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines, only the final table")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if o.servers < 1 || o.records < 1 || o.total < 1 {
		return cli.Usagef("--servers, --records and --total must be >= 1")
	}
	if o.leaveAt < 0 || o.leaveAt >= 1 {
		return cli.Usagef("--leave-at must be in [0, 1)")
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d := &demo{opts: o, out: stdout, logger: logger, src: memory.NewSource[int64](), sink: memsink.NewSink[int64]()}
	return d.run(ctx)
}

type demo struct {
	opts   demoOptions
	out    io.Writer
	logger *slog.Logger
	src    *memory.Source[int64]
	sink   *memsink.Sink[int64]
}

// demoServer is one server of the demo: a Node and its job's counters.
type demoServer struct {
	id      string
	node    *dataflow.Node
	st      store.Store
	job     *demoJob
	left    bool // left midway, by the demo's script
	stopped bool
	stopErr error
}

// demoJob is the demo's dataflow job: claim records of the shard item,
// simulate work, record the effect, mark done.
type demoJob struct {
	src       *memory.Source[int64]
	sink      *memsink.Sink[int64]
	work      time.Duration
	failEvery int
	success   atomic.Int64
	failure   atomic.Int64
	mu        sync.Mutex
	items     map[int]bool
}

var errSimulated = errors.New("simulated failure")

func (j *demoJob) Fetch(ctx context.Context, sh dataflow.Shard) ([]memory.Record[int64], error) {
	j.mu.Lock()
	j.items[sh.Item] = true
	j.mu.Unlock()
	return j.src.Fetch(ctx, sh)
}

func (j *demoJob) Process(ctx context.Context, sh dataflow.Shard, r memory.Record[int64]) error {
	if j.work > 0 {
		t := time.NewTimer(j.work)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = j.src.Release(sh, r.ID)
			return ctx.Err()
		case <-t.C:
		}
	}
	if j.failEvery > 0 && r.ID%int64(j.failEvery) == int64(j.failEvery-1) {
		j.failure.Add(1)
		_ = j.src.Fail(sh, r.ID)
		return fmt.Errorf("record %d: %w", r.ID, errSimulated)
	}
	if err := j.sink.Write(ctx, sh, r.ID); err != nil {
		_ = j.src.Release(sh, r.ID)
		return err
	}
	if err := j.src.Done(sh, r.ID); err != nil {
		return err
	}
	j.success.Add(1)
	return nil
}

func (d *demo) run(ctx context.Context) error {
	o := d.opts
	recs := make([]memory.Record[int64], o.records)
	for i := range recs {
		recs[i] = memory.Record[int64]{ID: int64(i), Value: int64(i)}
	}
	if err := d.src.Add(recs...); err != nil {
		return err
	}
	embedded := o.conn.Spec() == ""
	var mem *memstore.Server
	if embedded {
		mem = memstore.NewServer()
	}
	cfg := dataflow.JobConfig{
		JobName:                          o.job,
		Cron:                             "* * * * * ?",
		ShardingTotalCount:               o.total,
		FetchDataCount:                   200,
		ConcurrentDataProcessThreadCount: 4,
		StreamingProcess:                 true,
		Failover:                         true,
		ProcessCountInterval:             time.Second,
		Description:                      "shardflow demo: claim generated records, simulate work, record effects",
		Overwrite:                        true,
		// The demo fails records on purpose and shows them in its table;
		// the ignore policy keeps them out of the log (they are still counted).
		ErrorPolicy: jobconfig.ErrorPolicyIgnore,
	}
	host, _ := os.Hostname()
	servers := make([]*demoServer, o.servers)
	for i := range servers {
		s := &demoServer{id: fmt.Sprintf("demo-%d", i+1)}
		if !embedded {
			s.id = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), i+1)
		}
		var err error
		if embedded {
			s.st = mem.Connect()
		} else if s.st, _, err = o.conn.Open(ctx); err != nil {
			d.stopAll(servers)
			return err
		}
		s.job = &demoJob{src: d.src, sink: d.sink, work: o.work, failEvery: o.failEvery, items: map[int]bool{}}
		s.node, err = dataflow.NewNode(dataflow.NodeConfig{
			Store:     s.st,
			Namespace: o.conn.Namespace,
			ServerID:  s.id,
			Logger:    d.logger,
		})
		if err == nil {
			err = dataflow.AddJob[memory.Record[int64]](ctx, s.node, cfg, s.job)
		}
		if err == nil {
			err = s.node.Start(ctx)
		}
		servers[i] = s
		if err != nil {
			d.stopAll(servers)
			return fmt.Errorf("start server %s: %w", s.id, err)
		}
	}
	fmt.Fprintf(d.out, "demo: job %q, %d records over %d shard items, %d servers (%s)\n",
		o.job, o.records, o.total, o.servers, map[bool]string{true: "embedded store", false: o.conn.Describe()}[embedded])

	admin := coord.NewAdmin(servers[0].st, o.conn.Namespace)
	err := d.watch(ctx, servers, admin, embedded)
	final, statusErr := admin.Status(context.Background(), o.job)
	d.stopAll(servers)
	if statusErr == nil {
		d.printSummary(servers, final)
	}
	return err
}

// watch prints progress until the work is done, the deadline passes or ctx ends;
// it makes the last server leave once leaveAt of the records are done.
func (d *demo) watch(ctx context.Context, servers []*demoServer, admin *coord.Admin, embedded bool) error {
	o := d.opts
	tty := false
	if f, ok := d.out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		tty = true
	}
	// On the embedded store the demo owns all the data and must finish by
	// the deadline. With --zk each process works its own copy of the items it
	// owns, so it runs for --duration or until interrupted.
	var deadline, stopAt <-chan time.Time
	if embedded && o.deadline > 0 {
		t := time.NewTimer(o.deadline)
		defer t.Stop()
		deadline = t.C
	}
	if !embedded && o.duration > 0 {
		t := time.NewTimer(o.duration)
		defer t.Stop()
		stopAt = t.C
	}
	interval := 2 * time.Second
	if tty {
		interval = 300 * time.Millisecond
	}
	// Poll often (the leave point and the end are noticed at once), print every interval.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var printed time.Time
	drawn := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			return fmt.Errorf("work not done after %s: see the table for what is left", o.deadline)
		case <-stopAt:
			return nil
		case <-tick.C:
		}
		pending, claimed, done, failed := d.src.Counts()
		finished := done + failed
		if embedded && o.leaveAt > 0 && len(servers) > 1 {
			last := servers[len(servers)-1]
			if !last.left && float64(finished) >= o.leaveAt*float64(o.records) {
				last.left, last.stopped = true, true
				fmt.Fprintf(d.out, "demo: server %s leaves now (%d of %d records finished); the others take over its items\n", last.id, finished, o.records)
				stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				last.stopErr = last.node.Stop(stopCtx)
				cancel()
				drawn = 0
			}
		}
		complete := embedded && pending == 0 && claimed == 0
		if !o.quiet && (complete || time.Since(printed) >= interval) {
			printed = time.Now()
			owners := d.owners(ctx, admin)
			lines := d.progressLines(owners)
			head := fmt.Sprintf("%5.1fs  done %d  failed %d  claimed %d  pending %d", time.Since(start).Seconds(), done, failed, claimed, pending)
			if tty {
				if drawn > 0 {
					fmt.Fprintf(d.out, "\x1b[%dA", drawn)
				}
				fmt.Fprintf(d.out, "\x1b[2K%s\n", head)
				for _, l := range lines {
					fmt.Fprintf(d.out, "\x1b[2K%s\n", l)
				}
				drawn = len(lines) + 1
			} else {
				fmt.Fprintf(d.out, "%s  |  %s\n", head, strings.Join(lines, "  "))
			}
		}
		if complete {
			fmt.Fprintf(d.out, "demo: all %d records finished in %.1fs\n", o.records, time.Since(start).Seconds())
			return nil
		}
	}
}

// owners maps each shard item to the server whose sharding holds it.
func (d *demo) owners(ctx context.Context, admin *coord.Admin) map[int]string {
	out := map[int]string{}
	st, err := admin.Status(ctx, d.opts.job)
	if err != nil {
		return out
	}
	for _, s := range st.Servers {
		for _, it := range s.Sharding {
			out[it] = s.ID
		}
	}
	return out
}

func (d *demo) progressLines(owners map[int]string) []string {
	lines := make([]string, d.opts.total)
	per := d.opts.records / d.opts.total
	for item := 0; item < d.opts.total; item++ {
		left := d.src.Remaining(item, d.opts.total)
		frac := 1 - float64(left)/float64(max(per, 1))
		frac = min(max(frac, 0), 1)
		bar := strings.Repeat("#", int(frac*20)) + strings.Repeat(".", 20-int(frac*20))
		lines[item] = fmt.Sprintf("item %d [%s] %3.0f%% %s", item, bar, frac*100, cli.OrDash(owners[item]))
	}
	return lines
}

func (d *demo) stopAll(servers []*demoServer) {
	for _, s := range servers {
		if s == nil {
			continue
		}
		if s.node != nil && !s.stopped {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.stopErr = s.node.Stop(stopCtx)
			cancel()
			s.stopped = true
		}
		if s.st != nil {
			_ = s.st.Close()
		}
	}
}

func (d *demo) printSummary(servers []*demoServer, final coord.JobStatus) {
	sharding := map[string][]int{}
	for _, s := range final.Servers {
		sharding[s.ID] = s.Sharding
	}
	fmt.Fprintln(d.out)
	tw := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSTATE\tITEMS AT END\tITEMS WORKED\tSUCCESS\tFAILURE")
	var sumS, sumF int64
	for _, s := range servers {
		if s == nil {
			continue
		}
		worked := make([]int, 0, len(s.job.items))
		s.job.mu.Lock()
		for it := range s.job.items {
			worked = append(worked, it)
		}
		s.job.mu.Unlock()
		sort.Ints(worked)
		state, atEnd := "live", cli.JoinInts(sharding[s.id])
		if s.left {
			// An offline server's sharding node is stale until the next reshard.
			state, atEnd = "left", "-"
		}
		ok, bad := s.job.success.Load(), s.job.failure.Load()
		sumS, sumF = sumS+ok, sumF+bad
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", s.id, state, atEnd, cli.JoinInts(worked), ok, bad)
	}
	fmt.Fprintf(tw, "total\t\t\t\t%d\t%d\n", sumS, sumF)
	tw.Flush()
	fmt.Fprintf(d.out, "effects: %d distinct, %d duplicate\n", d.sink.Distinct(), d.sink.Duplicates())
}
