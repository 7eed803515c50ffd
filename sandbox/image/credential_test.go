package image

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/test/imagetest"
	"github.com/airlock-dev/airlock/test/privtest"
)

// loginRegistry is an in-process registry that wants Basic user:pass on every request, and
// sends each blob download to another host (as registries send them to a CDN), which records
// every Authorization header it is sent.
type loginRegistry struct {
	ref        string
	mu         sync.Mutex
	cdnAuth    []string // Authorization headers the blob host received
	cdnBlobs   int
	registryOK int // requests the registry served with the right login
}

func serveLoginRegistry(t *testing.T, user, pass string) *loginRegistry {
	t.Helper()
	lr := &loginRegistry{}
	h := imagetest.Registry(t, imagetest.Busybox(t), "private")
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lr.mu.Lock()
		lr.cdnBlobs++
		if a := r.Header.Get("Authorization"); a != "" {
			lr.cdnAuth = append(lr.cdnAuth, a)
		}
		lr.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(cdn.Close)
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		lr.mu.Lock()
		lr.registryOK++
		lr.mu.Unlock()
		if strings.Contains(r.URL.Path, "/blobs/") {
			http.Redirect(w, r, cdn.URL+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(reg.Close)
	lr.ref = strings.TrimPrefix(reg.URL, "http://") + "/private:latest"
	return lr
}

// TestPullWithLogin: a registry that wants a login refuses an anonymous pull with a message
// naming --image-pull-secret and a wrong login, takes the right one, and the login never
// reaches the host its blob downloads are redirected to.
func TestPullWithLogin(t *testing.T) {
	privtest.Require(t)
	lr := serveLoginRegistry(t, "robot", "s3cr3t-registry-token")
	get := func(c *Credential) error {
		s := &Store{Dir: filepath.Join(t.TempDir(), "images"), Transport: http.DefaultTransport, Credential: c}
		_, err := s.Get(context.Background(), lr.ref, owner(t, "s"))
		return err
	}
	err := get(nil)
	if err == nil || !strings.Contains(err.Error(), "--image-pull-secret") {
		t.Errorf("anonymous pull: %v; want a refusal naming --image-pull-secret", err)
	}
	if err := get(&Credential{Username: "robot", Password: "wrong"}); err == nil {
		t.Error("a wrong login pulled the image")
	} else if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the password: %v", err)
	}
	if err := get(&Credential{Username: "robot", Password: "s3cr3t-registry-token"}); err != nil {
		t.Fatalf("pull with the login: %v", err)
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.registryOK == 0 || lr.cdnBlobs == 0 {
		t.Fatalf("registry served %d requests with the login, blob host %d: the test did not exercise the redirect", lr.registryOK, lr.cdnBlobs)
	}
	if len(lr.cdnAuth) != 0 {
		t.Errorf("the blob host (another host, reached by redirect) was sent Authorization %q", lr.cdnAuth)
	}
}

func TestParseCredential(t *testing.T) {
	c, err := ParseCredential("robot:tok:with:colons\n")
	if err != nil || c.Username != "robot" || c.Password != "tok:with:colons" {
		t.Errorf("ParseCredential: %+v %v", c, err)
	}
	if strings.Contains(c.String(), "tok") {
		t.Errorf("String shows the password: %s", c)
	}
	for _, bad := range []string{"", "tokenonly", ":pass", "user:"} {
		if _, err := ParseCredential(bad); err == nil || strings.Contains(err.Error(), bad) && bad != "" {
			t.Errorf("ParseCredential(%q): %v", bad, err)
		}
	}
}
