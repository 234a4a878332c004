package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// currentConnGo reads conn.go of the go-zookeeper version in shardflow's
// build list.
func currentConnGo(t *testing.T) []byte {
	t.Helper()
	var zk module
	if err := goJSON(&zk, "mod", "download", "-json", zkModule); err != nil || zk.Dir == "" {
		t.Fatalf("locating %s: %v %s", zkModule, err, zk.Error)
	}
	src, err := os.ReadFile(filepath.Join(zk.Dir, "conn.go"))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestPatchMakesEveryAccessAtomic(t *testing.T) {
	src := currentConnGo(t)
	out, err := Patch(src)
	if err != nil {
		t.Fatalf("the go-zookeeper of go.mod no longer matches the patch: %v", err)
	}
	if got, want := bytes.Count(out, []byte("\n")), bytes.Count(src, []byte("\n")); got != want {
		t.Errorf("patched conn.go has %d lines, the original %d: race reports would point at wrong lines", got, want)
	}
	if n := bytes.Count(out, []byte("atomic.LoadInt64(&c.lastZxid)")); n != 2 {
		t.Errorf("%d atomic loads of lastZxid, want 2", n)
	}
	if n := bytes.Count(out, []byte("atomic.StoreInt64(&c.lastZxid, ")); n != 2 {
		t.Errorf("%d atomic stores of lastZxid, want 2", n)
	}
}

// TestPatchFailsLoudly: any drift of the source from what the rules expect
// is an error naming the expectation, never a silent partial patch.
func TestPatchFailsLoudly(t *testing.T) {
	src := string(currentConnGo(t))
	for _, tc := range []struct {
		name, from, to, wantErr string
	}{
		{"racing write rewritten upstream", "c.lastZxid = res.Zxid", "c.setLastZxid(res.Zxid)", `"c.lastZxid = res.Zxid" exactly 1 time(s), found it 0`},
		{"racing read moved", "RelativeZxid: c.lastZxid,", "RelativeZxid: zxid,", `"RelativeZxid: c.lastZxid," exactly 1 time(s), found it 0`},
		{"an access duplicated", "c.lastZxid = 0", "c.lastZxid = 0\n\t\tc.lastZxid = 0", `"c.lastZxid = 0" exactly 1 time(s), found it 2`},
		{"a new plain access", "func (c *Conn) authenticate() error {", "func (c *Conn) authenticate() error {\n\t_ = c.lastZxid", "no access to c.lastZxid besides"},
		{"field no longer first", "type Conn struct {\n\tlastZxid", "type Conn struct {\n\tflag bool\n\tlastZxid", "lastZxid int64 as the first field of Conn"},
		{"field type changed", "lastZxid         int64", "lastZxid         atomic.Int64", "lastZxid int64 as the first field of Conn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(src, tc.from) {
				t.Fatalf("test input %q not in conn.go", tc.from)
			}
			_, err := Patch([]byte(strings.Replace(src, tc.from, tc.to, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Patch error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
