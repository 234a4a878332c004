package jobs

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/shardflow/shardflow/coord/jobconfig"
)

// SecretEnvPrefix is the prefix of the environment variables a header's
// ${env:NAME} reference may name: a job's definer can reach only the
// secrets the worker's operator put there for jobs, never the worker's own
// credentials (SHARDFLOW_ZK_AUTH, SHARDFLOW_CONSOLE_TOKEN, ...).
const SecretEnvPrefix = "SHARDFLOW_SECRET_"

// maxSecretFileBytes bounds a ${file:NAME} secret.
const maxSecretFileBytes = 64 << 10

// ErrSecret: a secret reference in a stored job could not be resolved.
var ErrSecret = errors.New("jobs: secret reference not resolved")

// secrets resolves the ${env:NAME} and ${file:NAME} references of stored
// HTTP headers on this worker, so the secrets stay in the worker's own
// environment and files and never in the coordination service.
type secrets struct {
	// dir holds the ${file:NAME} secrets, one file each (a Kubernetes
	// secret volume); "" refuses file references.
	dir string
}

// resolve returns the secret a reference names.
func (s secrets) resolve(kind, name string) (string, error) {
	switch kind {
	case "env":
		if !strings.HasPrefix(name, SecretEnvPrefix) {
			return "", fmt.Errorf("%w: ${env:%s}: a job may read only variables named %s*; export the secret as %s%s on the worker",
				ErrSecret, name, SecretEnvPrefix, SecretEnvPrefix, name)
		}
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("%w: ${env:%s}: the variable is not set on this worker", ErrSecret, name)
		}
		return v, nil
	case "file":
		if s.dir == "" {
			return "", fmt.Errorf("%w: ${file:%s}: this worker has no secret directory; start it with --secret-dir", ErrSecret, name)
		}
		if name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
			return "", fmt.Errorf("%w: ${file:%s}: name a file directly inside the secret directory", ErrSecret, name)
		}
		f, err := os.Open(filepath.Join(s.dir, name))
		if err != nil {
			return "", fmt.Errorf("%w: ${file:%s}: %v", ErrSecret, name, err)
		}
		defer f.Close()
		buf := make([]byte, maxSecretFileBytes+1)
		n, _ := f.Read(buf)
		if n > maxSecretFileBytes {
			return "", fmt.Errorf("%w: ${file:%s}: over %d bytes", ErrSecret, name, maxSecretFileBytes)
		}
		return strings.TrimRight(string(buf[:n]), "\r\n"), nil
	}
	return "", fmt.Errorf("%w: unknown reference kind %q", ErrSecret, kind)
}

// headers parses a stored httpHeaders value with its references resolved,
// and returns the secrets in it (the resolved values and every literal
// header value) for redacting error texts.
func (s secrets) headers(text string) (map[string][]string, []string, error) {
	resolved, err := jobconfig.ReplaceSecretRefs(text, s.resolve)
	if err != nil {
		return nil, nil, err
	}
	h, err := jobconfig.ParseHTTPHeaders(resolved)
	if err != nil {
		return nil, nil, err
	}
	var values []string
	for _, vs := range h {
		for _, v := range vs {
			values = append(values, v)
			if _, cred, ok := strings.Cut(v, " "); ok {
				values = append(values, strings.TrimSpace(cred))
			}
		}
	}
	return h, values, nil
}

// url resolves the references in a stored httpUrl (an API key in its
// query: "?key=${env:SHARDFLOW_SECRET_KEY}") and returns the resolved
// values, for redacting error texts.
func (s secrets) url(raw string) (string, []string, error) {
	var values []string
	resolved, err := jobconfig.ReplaceSecretRefs(raw, func(kind, name string) (string, error) {
		v, err := s.resolve(kind, name)
		if err == nil {
			values = append(values, v)
			v = url.QueryEscape(v) // a value, never URL syntax
		}
		return v, err
	})
	return resolved, values, err
}
