# shardflow developer tasks. `make` alone lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO ?= go
# Local images built by scripts/build-images.sh: this project's machines have no
# container registry. On a machine with one, unset these to use the official
# zookeeper:3.9 and postgres:16 images.
SHARDFLOW_ZK_IMAGE ?= shardflow-local/zookeeper:3.8
SHARDFLOW_PG_IMAGE ?= shardflow-local/postgres:15
# Ryuk (testcontainers' reaper) is an image to pull, and testcontainers reads
# this once per process: the harness removes its containers itself.
TEST_ENV := TESTCONTAINERS_RYUK_DISABLED=true SHARDFLOW_REQUIRE_DOCKER=1 \
	SHARDFLOW_ZK_IMAGE=$(SHARDFLOW_ZK_IMAGE) SHARDFLOW_PG_IMAGE=$(SHARDFLOW_PG_IMAGE)
# go-zookeeper has a data race of its own (lastZxid, go-zookeeper/zk#35): test
# builds use a Go workspace that replaces the module with a copy whose two
# racing accesses are made atomic, generated from the module cache at build
# time (internal/zkoverlay; docs/development.md). -race stays on everywhere.
ZK_OVERLAY_DIR := $(CURDIR)/.build/zk-overlay
ZK_WORK := GOWORK=$(ZK_OVERLAY_DIR)/go.work SHARDFLOW_ZK_RACE_CHECK=1
TEST_TIMEOUT ?= 25m
FUZZTIME ?= 15s
PKGS ?= ./...

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "} {printf "  %-18s %s\n", $$1, $$2}'

.PHONY: demo
demo: ## run the embedded demo (several servers in one process, no ZooKeeper needed)
	$(GO) run ./cmd/shardflow demo

.PHONY: setup
setup: ## install missing Debian packages and build the local images (idempotent)
	scripts/setup.sh

.PHONY: images
images: ## build shardflow-local/zookeeper:3.8 and shardflow-local/postgres:15 without a registry
	scripts/build-images.sh

.PHONY: clean-containers
clean-containers: ## remove containers and networks left by a killed test binary (not while another test run is active)
	@ids=$$(docker ps -aq --filter label=org.shardflow.integration=true); \
	if [[ -n $$ids ]]; then echo "removing leftover containers: $$ids"; docker rm -f -v $$ids >/dev/null; fi; \
	nets=$$(docker network ls -q --filter label=org.shardflow.integration=true); \
	if [[ -n $$nets ]]; then docker network rm $$nets >/dev/null; fi

# The slowest packages, named first so that go test starts them first rather
# than last (its scheduling follows the command line; ./... does not repeat
# them). Slow by nature, not by sleeps: process kills, ZooKeeper restarts and
# session expiries on real containers.
SLOW_PKGS := ./integration/faults ./examples/pgbatch

# When the images must be built (a fresh machine), make test compiles every
# test binary meanwhile (-exec true runs none): both take minutes, one on the
# CPU, the other mostly on the network and disk. With the images present it
# does not: go test relinks every binary anyway, links are not cached. It
# prints how long set-up (and the compile beside it) and the tests took
# (docs/development.md: how make test is staged, and why).
.PHONY: test
test: zk-overlay ## run every test, with race detector, on real ZooKeeper and Postgres containers
	@t0=$$(date +%s); \
	if docker image inspect $(SHARDFLOW_ZK_IMAGE) $(SHARDFLOW_PG_IMAGE) >/dev/null 2>&1; then \
		scripts/setup.sh || exit 1; \
		echo "[make test] set-up $$(( $$(date +%s) - t0 ))s (images present)"; \
	else \
		$(ZK_WORK) $(GO) test -race -exec true $(PKGS) >$(CURDIR)/.build/precompile.log 2>&1 & pre=$$!; \
		if ! scripts/setup.sh; then kill $$pre 2>/dev/null; wait $$pre; exit 1; fi; \
		echo "[make test] set-up $$(( $$(date +%s) - t0 ))s (packages and images)"; \
		wait $$pre || true; \
		echo "[make test] test binaries compiled beside it in $$(( $$(stat -c %Y $(CURDIR)/.build/precompile.log) - t0 ))s"; \
	fi; \
	t1=$$(date +%s); \
	$(TEST_ENV) $(ZK_WORK) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(if $(filter ./...,$(PKGS)),$(SLOW_PKGS)) $(PKGS); rc=$$?; \
	echo "[make test] tests $$(( $$(date +%s) - t1 ))s, in all $$(( $$(date +%s) - t0 ))s"; \
	exit $$rc

.PHONY: quickstart
quickstart: ## run docs/quickstart.md word for word (ZooKeeper, Postgres, 3 workers, status, console, history) on the local images
	SHARDFLOW_ZK_IMAGE=$(SHARDFLOW_ZK_IMAGE) SHARDFLOW_PG_IMAGE=$(SHARDFLOW_PG_IMAGE) scripts/quickstart.sh

.PHONY: test-integration
test-integration: setup zk-overlay ## run only the integration harness's own tests
	$(TEST_ENV) $(ZK_WORK) $(GO) test -race -count=1 -timeout 10m -v ./integration/...

# make sim: the seeded protocol simulation (coordtest.Simulate). SEED empty:
# derived from the clock; schedule i runs seed SEED+i. STORE=zk runs it on a
# real ZooKeeper container. REPEAT=R runs each seed R times and prints
# "repeat: seed N failed F of R" for each.
SEED ?=
SCHEDULES ?= 300
STORE ?= mem
REPEAT ?= 1
.PHONY: sim
sim: zk-overlay ## seeded protocol simulation (and, on the embedded store, the workflow one): make sim SEED=N SCHEDULES=K [STORE=zk|pg] [REPEAT=R]; last line: schedules=K violations=V seed=N
	@out=$$(mktemp); wf=$$(mktemp); \
	SIM_SEED=$(SEED) SIM_SCHEDULES=$(SCHEDULES) SIM_STORE=$(STORE) SIM_REPEAT=$(REPEAT) $(TEST_ENV) $(ZK_WORK) \
		$(GO) test -race -count=1 -timeout 0 -run '^TestSimulation(ZooKeeper|Postgres)?$$' -v ./coord/protocol/ > $$out 2>&1; rc=$$?; \
	if [ "$(STORE)" = mem ] && [ "$(REPEAT)" = 1 ]; then \
		seed=$$(grep '^schedules=' $$out | tail -1 | sed 's/.*seed=//'); \
		SIM_SEED=$${seed:-$(SEED)} SIM_SCHEDULES=$(SCHEDULES) $(GO) test -race -count=1 -timeout 0 -run '^TestWorkflowSimulation$$' -v ./coord/workflow/ > $$wf 2>&1 || rc=1; fi; \
	awk '/sim_test.go/ {p = 1; print; next} /^[ \t]/ {if (p) print; next} {p = 0} /^(FAIL|panic)/' $$out; grep '^repeat:' $$out; \
	awk '/(random|faults)_test.go/ {print} /^(FAIL|panic)/' $$wf; grep '^workflow: schedules=' $$wf; \
	{ grep '^schedules=' $$out | tail -1; grep '^workflow: schedules=' $$wf; } | awk '{for (i = 1; i <= NF; i++) {split($$i, kv, "="); if (kv[1] == "violations") v += kv[2]} if ($$1 != "workflow:") {k = $$1; s = $$3}} END {if (k != "") print k " violations=" v+0 " " s}'; \
	rm -f $$out $$wf; exit $$rc

# make campaign: a long simulation campaign over PROCS processes
# (scripts/campaign.sh): the test binary built once, the seeds in chunks
# (CHUNK) with a log each under .build/ (the directory is printed first),
# and at the end the totals and every failing seed with its first error.
PROCS ?= 1
CHUNK ?=
.PHONY: campaign
campaign: zk-overlay ## simulation campaign: make campaign STORE=mem|zk|pg|workflow SEED=N SCHEDULES=K PROCS=P [CHUNK=C] [NICE=N]; prints its log directory, a line per chunk, then schedules, violations and each failing seed
	@$(TEST_ENV) $(ZK_WORK) GO=$(GO) STORE=$(STORE) SEED=$(SEED) SCHEDULES=$(SCHEDULES) PROCS=$(PROCS) CHUNK=$(CHUNK) scripts/campaign.sh

.PHONY: join-zk
join-zk: zk-overlay ## K processes (2..10) joining one job at once on real ZooKeeper, 100 rounds (JOIN_ROUNDS to change)
	@out=$$(mktemp); \
	SHARDFLOW_ZK_JOIN_ROUNDS=$(or $(JOIN_ROUNDS),100) $(TEST_ENV) $(ZK_WORK) \
		$(GO) test -race -count=1 -timeout 0 -run '^TestProtocolZooKeeper$$/^ConcurrentJoin$$' -v ./coord/protocol/ > $$out 2>&1; rc=$$?; \
	grep -E '^\s*(---|ok|FAIL|panic)|join.go' $$out; rm -f $$out; exit $$rc

.PHONY: zk-overlay
zk-overlay: ## generate .build/zk-overlay/go.work: go-zookeeper with its lastZxid race fixed, for test builds
	@$(GO) run ./internal/zkoverlay -out $(ZK_OVERLAY_DIR) >/dev/null

.PHONY: zk-race-proof
zk-race-proof: zk-overlay ## show that -race reports go-zookeeper's lastZxid race without the workspace and not with it
	@run='$(GO) test -race -count=1 -v -run ^TestSetWatchesLastZxidRace$$ ./internal/zkoverlay'; \
	out=$$(SHARDFLOW_ZK_RACE_CHECK=1 GOWORK=off $$run 2>&1); \
	if grep -q 'WARNING: DATA RACE' <<<"$$out" && grep -q 'sendSetWatches' <<<"$$out"; then \
		echo "without the workspace: the race detector reports recvLoop/sendSetWatches on lastZxid (expected)"; \
	else echo "$$out"; echo "zk-race-proof: expected the lastZxid race to be reported without the workspace"; exit 1; fi; \
	out=$$($(ZK_WORK) $$run 2>&1); \
	if grep -q -- '--- PASS: TestSetWatchesLastZxidRace' <<<"$$out"; then \
		echo "with the workspace: no race reported (expected)"; \
	else echo "$$out"; echo "zk-race-proof: expected no race with the workspace"; exit 1; fi

.PHONY: bench
bench: ## run the benchmarks (no tests)
	$(TEST_ENV) $(GO) test -run '^$$' -bench . $(PKGS)

.PHONY: bench-pg
bench-pg: ## Postgres benchmark (shardflow claim/tx, tx coordinated by pgstore in another or the same database, vs pgx loop vs river vs one UPDATE); needs SHARDFLOW_PG, a role allowed to CREATE DATABASE; ROWS ROUNDS BATCH ONLY THREADS; PG_CPUACCT: the server container's cpuacct.usage, for its CPU per measurement; PROFILE=1: WAL, statements and wait events per measurement
	@[[ -n "$$SHARDFLOW_PG" ]] || { echo "set SHARDFLOW_PG to a Postgres DSN (the role must be allowed to CREATE DATABASE)"; exit 2; }
	uptime
	cd bench && $(GO) run ./pgbench --pg "$$SHARDFLOW_PG" --rows $${ROWS:-1000000} --rounds $${ROUNDS:-1} --batch $${BATCH:-1000} --only "$${ONLY:-}" --threads $${THREADS:-1} --pg-cpuacct "$${PG_CPUACCT:-}" $${PROFILE:+--profile}

.PHONY: bench-engine
bench-engine: ## the pipeline engine against a hand-written worker pool (1M no-op items), and pipelined fetching on an I/O-bound job
	uptime
	$(GO) test -run '^$$' -bench 'EngineVsPool' -benchtime 100x -count 5 ./dataflow
	$(GO) test -run '^$$' -bench 'PipelinedFetch' -benchtime 3x -count 5 ./dataflow

.PHONY: bench-coord
bench-coord: ## coordination requests per trigger for S servers and N items (counting store; COST_ITEMS to change N)
	SHARDFLOW_COST_ITEMS=$${COST_ITEMS:-8,64,512,2048,10000} $(GO) test -count=1 -run TestCoordinationCost -v ./coord/protocol/

.PHONY: screenshots
screenshots: ## regenerate the console screenshots in docs/ (headless chromium, the browser test)
	SHARDFLOW_SCREENSHOTS=$(CURDIR)/docs SHARDFLOW_REQUIRE_DOCKER=1 $(GO) test -count=1 -run '^TestConsole(Workflow)?InBrowser$$' ./cmd/shardflow

.PHONY: bench-scale
bench-scale: ## a 10,000-item job over 3 servers on real ZooKeeper: reshard, run, status, crash, failover (SCALE_ITEMS to change; STORE=pg: coord/pgstore on Postgres; STORE=zk,pg: both, one after the other in one run)
	uptime
	@set -o pipefail; case "$${STORE:-zk}" in zk) run=ZooKeeper ;; pg) run=Postgres ;; zk,pg|pg,zk) run='(ZooKeeper|Postgres)' ;; \
		*) echo "bench-scale: STORE=$$STORE: want zk, pg or zk,pg"; exit 2 ;; esac; \
	$(TEST_ENV) SHARDFLOW_SCALE_ITEMS=$${SCALE_ITEMS:-10000} $(GO) test -count=1 -timeout 40m -run "^TestScale$$run\$$" -v ./coord/protocol/ | grep -E 'SCALE|^(---|ok|FAIL)|_test.go'
	uptime

.PHONY: bench-failover
bench-failover: ## failover latency after SIGKILL, busy and idle survivors, 10 kills each (FAILOVER_KILLS to change; RACE=-race for the race build; STORE=pg: coord/pgstore on Postgres; STORE=zk,pg: both, one after the other)
	uptime
	$(TEST_ENV) SHARDFLOW_FAILOVER_KILLS=$${FAILOVER_KILLS:-10} SHARDFLOW_FAILOVER_STORE=$${STORE:-zk} $(GO) test $(RACE) -count=1 -timeout 40m -run '^TestFailoverAfterKill(IdleSurvivors)?$$' -v ./integration/faults | grep -E 'FAILOVER survivors|kill [0-9]|^\s*(---|ok|FAIL)'
	uptime

.PHONY: bench-jobs
bench-jobs: ## JOBS idle jobs (default 1000) on one Node on real ZooKeeper (STORE=mem: memstore; STORE=pg: coord/pgstore on Postgres; ZK_HEAP=1g: a ZooKeeper of its own with that heap; ZK_ADDR=published: through Docker's port proxy): add time, goroutines/RSS per job, Stop, restart (BASELINE=rev: the code at git rev first, then this tree, alternating ROUNDS times, default 1)
	uptime
	@set -o pipefail; export $(TEST_ENV) SHARDFLOW_SCALE_JOBS=$${JOBS:-1000} SHARDFLOW_SCALE_STORE=$${STORE:-zk} SHARDFLOW_SCALE_ZK_HEAP=$${ZK_HEAP:-} SHARDFLOW_SCALE_ZK_ADDR=$${ZK_ADDR:-}; \
	if [ -n "$(BASELINE)" ]; then scripts/bench-jobs-ab.sh '$(BASELINE)' $(or $(ROUNDS),1); \
	else $(GO) test -count=1 -timeout 20m -run '^TestScaleJobs$$' -v ./dataflow/ | grep -E 'JOBS|^(---|ok|FAIL)|_test.go'; fi
	uptime

# make bench-fires: the scheduler at scale (issue 31). DURATION is the
# measured window in seconds (not SECONDS: bash's own variable). STORE is
# read from the environment, as bench-jobs does: the Makefile's own STORE
# (mem) is the simulation's.
.PHONY: bench-fires
bench-fires: ## JOBS jobs (default 1000) on one CRON (default every second) over SERVERS processes (default 3) on real ZooKeeper for DURATION s (default 30): fires/s against expected, misfires, fire->BeforeRun p50/p99/max, store requests per worker (WARMUP, GRACE s; ZK_HEAP, default 1g; STORE=pg: on Postgres; COMPARE=1: without then with group commit, side by side; BASELINE=rev: the fireworker built at git rev first, old beside new, with BASELINE_FLAGS (e.g. --monitor-execution=false); VARIANTS='flags;flags': fireworker flag sets measured too; PROFILE=dir: workers' CPU profiles; KEEP=dir: the workers' runs files and store request logs; the window starts after every job's first fire; SETTLE=s: a baseline without the warm line waits s after ready instead)
	uptime
	@set -o pipefail; $(TEST_ENV) SHARDFLOW_FIRES_JOBS=$(or $(JOBS),1000) SHARDFLOW_FIRES_SERVERS=$(or $(SERVERS),3) \
		SHARDFLOW_FIRES_CRON='$(or $(CRON),* * * * * ?)' SHARDFLOW_FIRES_SECONDS=$(or $(DURATION),30) \
		SHARDFLOW_FIRES_WARMUP=$(WARMUP) SHARDFLOW_FIRES_GRACE=$(GRACE) SHARDFLOW_FIRES_ZK_HEAP=$(ZK_HEAP) SHARDFLOW_FIRES_STORE=$${STORE:-zk} \
		SHARDFLOW_FIRES_COMPARE=$(COMPARE) SHARDFLOW_FIRES_BASELINE=$(BASELINE) SHARDFLOW_FIRES_BASELINE_FLAGS='$(BASELINE_FLAGS)' SHARDFLOW_FIRES_VARIANTS='$(VARIANTS)' SHARDFLOW_FIRES_PROFILE=$(if $(PROFILE),$(abspath $(PROFILE))) SHARDFLOW_FIRES_KEEP=$(if $(KEEP),$(abspath $(KEEP))) SHARDFLOW_FIRES_SETTLE=$(SETTLE) \
		$(GO) test -count=1 -timeout 60m -run '^TestFires$$' -v ./dataflow/ | grep -E 'FIRES|^(---|ok|FAIL)|_test.go'
	uptime

.PHONY: bench-rolling
bench-rolling: ## a rolling restart of 3 pgbatch workers on real ZooKeeper and Postgres, 10 replacements while rows keep coming (REPLACEMENTS, ROWS of backlog to change): lost, duplicate effects, failover runs, ownerless time p99/max
	uptime
	@set -o pipefail; $(TEST_ENV) SHARDFLOW_ROLLING_REPLACEMENTS=$(or $(REPLACEMENTS),10) SHARDFLOW_ROLLING_ROWS=$(or $(ROWS),100000) $(GO) test -count=1 -timeout 20m -run '^TestRollingRestart$$' -v ./examples/pgbatch/ | grep -E 'ROLLING|verify:|^(---|ok|FAIL)|_test.go'
	uptime

# make image: the shardflow image, built with no registry: a static binary
# (CGO_ENABLED=0, the time zone database embedded) on FROM scratch
# (deploy/Dockerfile), the build context only the binary and the host's CA
# bundle. VERSION and COMMIT go into `shardflow version`.
IMAGE ?= shardflow
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
.PHONY: image
image: ## build the shardflow image (static binary on scratch, no registry): IMAGE=shardflow, tags VERSION and latest
	@[[ -f $(CA_BUNDLE) ]] || { echo "image: no CA bundle at $(CA_BUNDLE) (apt-get install ca-certificates, or set CA_BUNDLE)"; exit 2; }
	@mkdir -p .build/image
	CGO_ENABLED=0 $(GO) build -trimpath -tags timetzdata -ldflags "-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o .build/image/shardflow ./cmd/shardflow
	cp $(CA_BUNDLE) .build/image/ca-certificates.crt
	docker build -q -f deploy/Dockerfile -t $(IMAGE):$(VERSION) -t $(IMAGE):latest .build/image
	@docker run --rm $(IMAGE):$(VERSION) version
	@docker image inspect -f '$(IMAGE):$(VERSION) {{.Size}} bytes' $(IMAGE):$(VERSION)

.PHONY: lint
api-surface: ## count the exported names of the packages users import (top-level, methods, fields; -list in internal/apisurface prints them)
	$(GO) run ./internal/apisurface ./dataflow ./dataflow/dataflowtest ./sources/postgres ./sources/memory ./sinks/pgsink ./sinks/memsink ./history ./history/pghistory ./health ./jobs ./integration ./coord ./coord/jobconfig ./coord/connect

lint: ## gofmt, go vet, and go.mod/go.sum as go mod tidy leaves them
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n $$out ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	$(GO) vet $(PKGS)

.PHONY: fuzz
fuzz: ## run each Fuzz target for FUZZTIME (default 15s)
	@set -e; for file in $$(git grep -l '^func Fuzz' -- '*_test.go'); do \
		dir=./$$(dirname $$file); \
		for target in $$(grep -oE '^func Fuzz[A-Za-z0-9_]+' $$file | cut -d' ' -f2); do \
			echo "fuzz $$dir $$target for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$dir; \
		done; \
	done
