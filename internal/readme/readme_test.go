// Package readme checks that the Go snippets of README.md compile.
package readme

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// prelude declares what the README's snippets take as given: the imports,
// a ZooKeeper session, a pool, the Order type and so on. Each snippet's
// top-level declarations follow it, and its statements become the body of
// a func returning error.
const prelude = `package snippet

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/dataflow/dataflowtest"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/sinks/pgsink"
	"github.com/shardflow/shardflow/sources/postgres"
)

var (
	_ = pgx.CollectRows[int]
	_ = dataflow.NewNode
	_ = dataflowtest.ServerID
	_ = history.BufferConfig{}
	_ = pghistory.NewBuffer
	_ = pgsink.CopyAppend
	_ = postgres.Migrate
)

type Order struct {
	ID     int64 ` + "`db:\"id\"`" + `
	Amount int64 ` + "`db:\"amount\"`" + `
}

var (
	ctx         context.Context
	zk          store.Store
	podName     string
	pool, db    *pgxpool.Pool
	spec        postgres.TableSpec
	settlements pgsink.Target
	rowsOf      func([]Order) pgx.CopyFromSource
	node        *dataflow.Node
	cfg         dataflow.JobConfig
)
`

// ordersJob is the README's first job, for the snippets that use it
// without declaring it.
const ordersJob = `
type orders struct{ db *pgxpool.Pool }

func (orders) Fetch(context.Context, dataflow.Shard) ([]Order, error) { return nil, nil }
func (orders) Process(context.Context, dataflow.Shard, Order) error  { return nil }
`

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestReadmeSnippetsCompile builds every Go snippet of README.md (with the
// prelude) and fails naming the snippet and the compiler's complaint.
func TestReadmeSnippetsCompile(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 4 {
		t.Fatalf("README.md has %d Go snippets; want at least 4", len(blocks))
	}
	// Inside the module, so that its packages resolve; removed after.
	dir, err := os.MkdirTemp(".", "snippets-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var pkgs []string
	for i, b := range blocks {
		decls, stmts := split(b[1])
		if !strings.Contains(decls, "type orders ") {
			decls = ordersJob + decls
		}
		src := fmt.Sprintf("%s\n%s\nfunc snippet() error {\n%s\nreturn nil\n}\n", prelude, decls, stmts)
		pkg := filepath.Join(dir, fmt.Sprintf("snippet%d", i+1))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "snippet.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(pkg))
	}
	out, err := exec.Command("go", append([]string{"vet"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("README.md's Go snippets do not build (snippetN is the Nth ```go block):\n%s", out)
	}
}

// split separates a snippet's top-level declarations (from a line starting
// "func " or "type " to the next line that is just "}", or a one-line
// type) from its statements, keeping each declaration's comment with it.
func split(snippet string) (decls, stmts string) {
	var d, s, comment []string
	in := false
	for _, line := range strings.Split(snippet, "\n") {
		switch {
		case in:
			d = append(d, line)
			in = line != "}"
		case strings.HasPrefix(line, "func ") || strings.HasPrefix(line, "type "):
			d = append(append(d, comment...), line)
			comment = nil
			in = strings.HasSuffix(line, "{")
		case strings.HasPrefix(line, "//"):
			comment = append(comment, line)
		default:
			s = append(append(s, comment...), line)
			comment = nil
		}
	}
	s = append(s, comment...)
	return strings.Join(d, "\n"), strings.Join(s, "\n")
}
