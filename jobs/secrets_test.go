package jobs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunScriptEnvIsMinimal: a script gets the base variables, the run
// context and the variables the operator named, never the worker's
// credentials (it inherited the whole environment before).
func TestRunScriptEnvIsMinimal(t *testing.T) {
	t.Setenv("SHARDFLOW_ZK_AUTH", "operator:zk-pass-4711")
	t.Setenv("SHARDFLOW_CONSOLE_TOKEN", "console-token-4712")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-4713")
	t.Setenv("APP_REGION", "eu-west")
	envFile := filepath.Join(t.TempDir(), "env")
	err := RunScript(t.Context(), []string{"/bin/sh", "-c", "env > " + envFile, "sh"}, testShard, ScriptOptions{Env: []string{"APP_REGION"}})
	if err != nil {
		t.Fatalf("RunScript: %v", err)
	}
	raw, _ := os.ReadFile(envFile)
	env := string(raw)
	for _, leaked := range []string{"zk-pass-4711", "console-token-4712", "aws-4713", "SHARDFLOW_ZK_AUTH"} {
		if strings.Contains(env, leaked) {
			t.Errorf("the script's environment holds %q:\n%s", leaked, env)
		}
	}
	for _, want := range []string{"APP_REGION=eu-west", "PATH=", "SHARDFLOW_JOB=nightly", "SHARDFLOW_EPOCH=77"} {
		if !strings.Contains(env, want) {
			t.Errorf("the script's environment lacks %q:\n%s", want, env)
		}
	}
}

func TestCheckScriptEnv(t *testing.T) {
	if err := CheckScriptEnv([]string{"APP_REGION", "SHARDFLOW_SECRET_DB"}); err != nil {
		t.Errorf("CheckScriptEnv refused allowed names: %v", err)
	}
	for _, bad := range []string{"SHARDFLOW_ZK_AUTH", "SHARDFLOW_CONSOLE_TOKEN", "", "A=B"} {
		if err := CheckScriptEnv([]string{bad}); err == nil {
			t.Errorf("CheckScriptEnv(%q) = nil, want a refusal", bad)
		}
	}
}

// TestRunScriptOutputRedacted: the output tail in the error hides DSN
// passwords and the SHARDFLOW_SECRET_* values the script was given.
func TestRunScriptOutputRedacted(t *testing.T) {
	t.Setenv("SHARDFLOW_SECRET_API", "api-secret-4714")
	err := RunScript(t.Context(), []string{"/bin/sh", "-c", `echo "connect postgres://app:db-pass-4715@db/x failed; key $SHARDFLOW_SECRET_API"; exit 1`, "sh"},
		testShard, ScriptOptions{Env: []string{"SHARDFLOW_SECRET_API"}})
	if !errors.Is(err, ErrScriptFailed) {
		t.Fatalf("err = %v", err)
	}
	for _, s := range []string{"db-pass-4715", "api-secret-4714"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error shows %q: %v", s, err)
		}
	}
	if !strings.Contains(err.Error(), "postgres://app:REDACTED@db/x failed") {
		t.Errorf("error lost the output: %v", err)
	}
}

// TestRunHTTPErrorsRedacted: neither a failed status (whose body echoes
// the token and a DSN) nor a transport error shows the URL's query or a
// header value.
func TestRunHTTPErrorsRedacted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "bad token "+r.Header.Get("Authorization")+"; dsn=postgres://u:dsn-pass-4716@db/x")
	}))
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	req := HTTPRequest{URL: srv.URL + "/run?api_key=query-4717", Header: http.Header{"Authorization": {"Bearer bearer-4718"}}}
	err := RunHTTP(t.Context(), client, req, testShard)
	if !errors.Is(err, ErrHTTPFailed) || !strings.Contains(err.Error(), "500") {
		t.Fatalf("err = %v, want the 500", err)
	}
	ln, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	closed := "http://" + ln.Addr().String()
	_ = ln.Close()
	req.URL = closed + "/run?api_key=query-4717"
	terr := RunHTTP(t.Context(), client, req, testShard)
	if terr == nil {
		t.Fatal("a request to a closed port succeeded")
	}
	for _, e := range []error{err, terr} {
		for _, s := range []string{"query-4717", "bearer-4718", "dsn-pass-4716"} {
			if strings.Contains(e.Error(), s) || strings.Contains(fmt.Sprintf("%+v", e), s) {
				t.Errorf("error shows %q: %v", s, e)
			}
		}
	}
	if !strings.Contains(terr.Error(), "api_key=REDACTED") {
		t.Errorf("transport error lost the URL: %v", terr)
	}
}

func TestSecretRefsResolve(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte("file-secret-4719\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHARDFLOW_SECRET_TOKEN", "env-secret-4720")
	t.Setenv("SHARDFLOW_ZK_AUTH", "op:zk")
	s := secrets{dir: dir}
	h, values, err := s.headers("Authorization: Bearer ${env:SHARDFLOW_SECRET_TOKEN}\nX-Key: ${file:api-key}")
	if err != nil {
		t.Fatal(err)
	}
	if h["Authorization"][0] != "Bearer env-secret-4720" || h["X-Key"][0] != "file-secret-4719" {
		t.Errorf("headers = %v", h)
	}
	if strings.Join(values, " ") == "" {
		t.Error("no secret values returned for redaction")
	}
	for _, bad := range []string{"X: ${env:SHARDFLOW_ZK_AUTH}", "X: ${env:HOME}", "X: ${file:..}", "X: ${env:SHARDFLOW_SECRET_UNSET}"} {
		if _, _, err := s.headers(bad); !errors.Is(err, ErrSecret) {
			t.Errorf("headers(%q) = %v, want ErrSecret", bad, err)
		}
	}
	if _, _, err := (secrets{}).headers("X: ${file:api-key}"); !errors.Is(err, ErrSecret) || !strings.Contains(err.Error(), "--secret-dir") {
		t.Errorf("file reference without a secret dir: %v", err)
	}
}

func TestSecretRefsInURL(t *testing.T) {
	t.Setenv("SHARDFLOW_SECRET_KEY", "k-4721&admin=1")
	s := secrets{}
	got, values, err := s.url("https://jobs.internal/run?key=${env:SHARDFLOW_SECRET_KEY}")
	if err != nil || got != "https://jobs.internal/run?key=k-4721%26admin%3D1" || len(values) != 1 || values[0] != "k-4721&admin=1" {
		t.Errorf("url = %q, %v, %v", got, values, err)
	}
	if _, _, err := s.url("https://jobs.internal/run?key=${env:HOME}"); !errors.Is(err, ErrSecret) {
		t.Errorf("a non-secret variable: %v", err)
	}
}
