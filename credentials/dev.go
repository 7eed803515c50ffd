package credentials

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// EnvSource reads secrets from the sidecar's environment (policy `env:`), for development.
// Lookup is the environment; nil means os.LookupEnv.
type EnvSource struct {
	Lookup func(key string) (string, bool)
}

var _ Source = EnvSource{}

// Fetch returns the variable s.Env. It returns an error wrapping ErrUnavailable when the
// variable is unset or empty.
func (e EnvSource) Fetch(_ context.Context, name string, s policy.Secret) (Value, error) {
	lookup := e.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, ok := lookup(s.Env)
	if !ok || v == "" {
		return Value{}, fmt.Errorf("read secret %q: environment variable %s is not set: %w", name, s.Env, ErrUnavailable)
	}
	return Value{Secret: v}, nil
}

// FileSource reads secrets from files (policy `file:`), for development and for secrets a
// platform mounts as files. One trailing newline (LF or CRLF) is removed. The file is read
// on every fetch, so a rotated file is picked up after the cache TTL.
type FileSource struct{}

var _ Source = FileSource{}

// Fetch reads s.File. It returns an error wrapping ErrUnavailable when the file cannot be
// read or is empty.
func (FileSource) Fetch(_ context.Context, name string, s policy.Secret) (Value, error) {
	b, err := os.ReadFile(s.File)
	if err != nil {
		return Value{}, fmt.Errorf("read secret %q from file: %w: %w", name, err, ErrUnavailable)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return Value{}, fmt.Errorf("read secret %q: file %s is empty: %w", name, s.File, ErrUnavailable)
	}
	return Value{Secret: v}, nil
}
