package egress

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
)

// FileCredentials reads the upstream proxy's Basic credentials from a file holding
// "user:password" (one line; a trailing line break is ignored). The file is read on first
// use and again when asked for fresh credentials (after a 407: it may have been rotated,
// e.g. a mounted Kubernetes secret). It is safe for concurrent use.
type FileCredentials struct {
	path string

	// mu guards user and pass.
	mu         sync.Mutex
	user, pass string
	loaded     bool
}

var _ ProxyCredentials = (*FileCredentials)(nil)

// NewFileCredentials returns credentials read from path; it does not read the file yet.
func NewFileCredentials(path string) *FileCredentials { return &FileCredentials{path: path} }

// Check reads the file once, so a bad file is reported at startup. Errors name the file,
// never its content.
func (f *FileCredentials) Check() error {
	_, _, err := f.ProxyCredentials(context.Background(), true)
	return err
}

// ProxyCredentials returns the user and password, reading the file when fresh or not yet
// read. Errors name the file, never its content.
func (f *FileCredentials) ProxyCredentials(_ context.Context, fresh bool) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loaded && !fresh {
		return f.user, f.pass, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", "", fmt.Errorf("read upstream proxy credentials: %w", err)
	}
	user, pass, err := ParseProxyCredentials(string(b))
	if err != nil {
		return "", "", fmt.Errorf("read upstream proxy credentials %s: %w", f.path, err)
	}
	f.user, f.pass, f.loaded = user, pass, true
	return user, pass, nil
}

// ParseProxyCredentials splits "user:password" (a trailing line break is ignored). Errors
// never hold the value.
func ParseProxyCredentials(s string) (user, password string, err error) {
	s = strings.TrimRight(s, "\r\n")
	user, password, ok := strings.Cut(s, ":")
	switch {
	case !ok || user == "":
		return "", "", fmt.Errorf("not user:password")
	case strings.ContainsAny(s, "\r\n"):
		return "", "", fmt.Errorf("more than one line (want user:password)")
	}
	return user, password, nil
}
