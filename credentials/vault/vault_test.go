package vault

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/test/vaulttest"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func startSource(t *testing.T, cfg Config) *Source {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func kv(path, field string, version int) policy.Secret {
	return policy.Secret{Vault: &policy.VaultRef{Path: path, Field: field, Version: version}}
}

// eventually polls cond until it holds or the deadline passes (a condition wait, not a sleep).
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestKVv2TokenFile(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV(t, "ci/github", map[string]any{"token": "first-token-value"})
	v.PutKV(t, "ci/github", map[string]any{"token": "second-token-value", "other": "x"})
	v.PutKV(t, "single", map[string]any{"only": "single-value"})
	src := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, TokenFile: writeFile(t, "token", v.RootToken)})
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		secret  policy.Secret
		want    string
		wantErr string
	}{
		{name: "latest", secret: kv("secret/data/ci/github", "token", 0), want: "second-token-value"},
		{name: "pinned version", secret: kv("secret/data/ci/github", "token", 1), want: "first-token-value"},
		{name: "single key without field", secret: kv("secret/data/single", "", 0), want: "single-value"},
		{name: "missing field", secret: kv("secret/data/ci/github", "nope", 0), wantErr: `field "nope" not found`},
		{name: "missing path", secret: kv("secret/data/absent", "token", 0), wantErr: "nothing at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := src.Fetch(ctx, tc.name, tc.secret)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want error containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "token-value") {
					t.Fatalf("error holds a value: %v", err)
				}
				return
			}
			if err != nil || got.Secret != tc.want {
				t.Fatalf("got %q, %v; want %q", got.Secret, err, tc.want)
			}
		})
	}
}

func TestPermissionDenied(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV(t, "team-a/key", map[string]any{"v": "team-a-value"})
	v.Policy(t, "only-b", `path "secret/data/team-b/*" { capabilities = ["read"] }`)
	out := v.Must(t, "POST", "auth/token/create", map[string]any{"policies": []string{"only-b"}, "ttl": "1h"})
	tok := out["auth"].(map[string]any)["client_token"].(string)
	src := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, Token: tok})
	_, err := src.Fetch(context.Background(), "a", kv("secret/data/team-a/key", "v", 0))
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("got %v, want permission denied", err)
	}
}

func TestAppRoleRenewalAndRelogin(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV(t, "app", map[string]any{"k": "approle-read-value"})
	v.Policy(t, "read-app", `path "secret/data/app" { capabilities = ["read"] }`)
	roleID, secretID := v.AppRole(t, "airlock", 2, 5, "read-app")
	src := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, Auth: AuthAppRole,
		RoleIDFile: writeFile(t, "role", roleID), SecretIDFile: writeFile(t, "secret", secretID)})
	got, err := src.Fetch(context.Background(), "app", kv("secret/data/app", "k", 0))
	if err != nil || got.Secret != "approle-read-value" {
		t.Fatalf("fetch after approle login: got %q, %v", got.Secret, err)
	}
	// token_ttl 2s, token_max_ttl 5s: the watcher renews, then renewal ends at the max TTL
	// and the source logs in again.
	eventually(t, 20*time.Second, "a token renewal and a second login", func() bool {
		logins, renewals, _ := src.Snapshot()
		return logins >= 2 && renewals >= 1
	})
	eventually(t, 10*time.Second, "a fetch with the new token", func() bool {
		got, err := src.Fetch(context.Background(), "app", kv("secret/data/app", "k", 0))
		return err == nil && got.Secret == "approle-read-value"
	})
}

func TestDynamicLeaseRenewedAndRevoked(t *testing.T) {
	v := vaulttest.Start(t)
	src := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, Token: v.RootToken})
	sec := policy.Secret{Vault: &policy.VaultRef{Path: "dyn/creds/db", Field: "value", Dynamic: true}}
	first, err := src.Fetch(context.Background(), "db", sec)
	if err != nil || !strings.HasPrefix(first.Secret, "dyn-db-") || first.LeaseID == "" {
		t.Fatalf("got %+v, %v", first.LeaseID, err)
	}
	// The lease TTL is 3s; it must outlive several TTLs by being renewed.
	eventually(t, 20*time.Second, "two lease renewals", func() bool {
		_, renewed, _ := v.LeaseStats(t)
		return renewed >= 2
	})
	if !v.LeaseAlive(t, first.LeaseID) {
		t.Fatal("lease expired while the source renews it")
	}
	again, err := src.Fetch(context.Background(), "db", sec)
	if err != nil || again.Secret != first.Secret || again.LeaseID != first.LeaseID {
		t.Fatalf("second fetch took a new lease (%v)", err)
	}
	if issued, _, _ := v.LeaseStats(t); issued != 1 {
		t.Fatalf("issued %d leases, want 1", issued)
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v.LeaseAlive(t, first.LeaseID) {
		t.Fatal("lease still alive after Close")
	}
	if _, _, revoked := v.LeaseStats(t); revoked != 1 {
		t.Fatalf("revoked %d, want 1", revoked)
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixedPolicy struct{ p *policy.Policy }

func (f fixedPolicy) Current() *policy.Policy { return f.p }

// TestBrokerVaultDownAndRotation: a broker over the real Vault serves a rotated value after
// the cache TTL, keeps serving the cached value while Vault is gone until the TTL, then
// fails closed.
func TestBrokerVaultDownAndRotation(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV(t, "rot", map[string]any{"k": "value-one-aaaa"})
	pol, err := policy.Parse("p.yaml", []byte(`apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: p}
spec:
  secrets:
    rot: {vault: {path: secret/data/rot, field: k}}
`))
	if err != nil {
		t.Fatal(err)
	}
	src := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, Token: v.RootToken, Timeout: 2 * time.Second})
	clk := &clock{t: time.Now()}
	b, err := credentials.New(credentials.Config{Policy: fixedPolicy{pol}, Vault: src, CacheTTL: time.Minute, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	value := func() (string, error) { return b.Value(ctx, "rot") }
	if got, err := value(); err != nil || got != "value-one-aaaa" {
		t.Fatalf("first: got %q, %v", got, err)
	}
	v.PutKV(t, "rot", map[string]any{"k": "value-two-bbbb"})
	if got, _ := value(); got != "value-one-aaaa" {
		t.Fatalf("within the TTL: got %q, want the cached value", got)
	}
	clk.add(31 * time.Second)
	if got, err := value(); err != nil || got != "value-two-bbbb" {
		t.Fatalf("after the refresh point: got %q, %v; want the rotated value", got, err)
	}
	if b.Redactor().String("value-one-aaaa value-two-bbbb") != credentials.Redacted+" "+credentials.Redacted {
		t.Fatal("redactor does not know both values")
	}
	v.Kill()
	clk.add(40 * time.Second) // past the refresh point, within the TTL
	if got, err := value(); err != nil || got != "value-two-bbbb" {
		t.Fatalf("vault down within the TTL: got %q, %v; want the cached value", got, err)
	}
	clk.add(30 * time.Second) // past the TTL
	if _, err := value(); !errors.Is(err, credentials.ErrUnavailable) {
		t.Fatalf("vault down past the TTL: got %v, want ErrUnavailable", err)
	}
}

// TestFaults uses a fake HTTP Vault for what the real one cannot easily do on demand: hang,
// and answer sealed.
func TestFaults(t *testing.T) {
	release := make(chan struct{})
	var sealed bool
	var mu sync.Mutex
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := sealed
		mu.Unlock()
		switch {
		case r.URL.Path == "/v1/auth/token/lookup-self":
			_, _ = w.Write([]byte(`{"data":{"ttl":0,"renewable":false}}`))
		case s:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"errors":["Vault is sealed"]}`))
		default:
			<-release
		}
	}))
	defer fake.Close()
	defer close(release)
	src := startSource(t, Config{Address: fake.URL, Token: "t", Timeout: 300 * time.Millisecond})
	start := time.Now()
	if _, err := src.Fetch(context.Background(), "x", kv("secret/data/x", "k", 0)); err == nil {
		t.Fatal("hanging vault: got no error")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("hanging vault: fetch took %v", d)
	}
	mu.Lock()
	sealed = true
	mu.Unlock()
	if _, err := src.Fetch(context.Background(), "x", kv("secret/data/x", "k", 0)); err == nil || !strings.Contains(err.Error(), "sealed") {
		t.Fatalf("sealed vault: got %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Address: "https://v", Auth: "ldap", Token: "t"},
		{Address: "https://v"},
		{Address: "https://v", Auth: AuthAppRole, RoleIDFile: "r"},
		{Address: "https://v", Auth: AuthKubernetes},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): got no error", cfg)
		}
	}
}

// TestTokenFileRotation: a new token written to the token file is picked up without a
// restart (an agent rotating it), and the old one is no longer needed.
func TestTokenFileRotation(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV(t, "tf", map[string]any{"k": "token-file-value"})
	first := rootToken(t, v)
	file := writeFile(t, "token", first)
	src := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, TokenFile: file})
	sec := kv("secret/data/tf", "k", 0)
	if got, err := src.Fetch(context.Background(), "tf", sec); err != nil || got.Secret != "token-file-value" {
		t.Fatalf("with the first token: %q, %v", got.Secret, err)
	}
	second := rootToken(t, v)
	if err := os.WriteFile(file, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a login with the new token file", func() bool {
		logins, _, _ := src.Snapshot()
		return logins >= 2
	})
	v.Must(t, "POST", "auth/token/revoke", map[string]any{"token": first})
	if got, err := src.Fetch(context.Background(), "tf", sec); err != nil || got.Secret != "token-file-value" {
		t.Fatalf("after rotation, with the first token revoked: %q, %v", got.Secret, err)
	}
}

// TestTokenFileRotatedBeforeWatch: a rotation that lands between a login and the start of
// that login's token file watch is seen, and the next login uses the new token. The gap is
// made deterministic by running the steps of authLoop one by one: log in with the first
// token, rotate the file, then start keepRenewed (which starts the watch). A watch whose
// baseline is the file as it finds it would take the new token for the one in use and never
// end; one whose baseline is the token that logged in ends at once.
func TestTokenFileRotatedBeforeWatch(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV(t, "tf", map[string]any{"k": "token-file-value"})
	first, second := rootToken(t, v), rootToken(t, v)
	file := writeFile(t, "token", first)
	s, err := New(Config{Address: v.Address, CACertFile: v.CACertFile, TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := s.login(context.Background())
	if err != nil || secret.Auth.ClientToken != first || !secret.Auth.Renewable {
		t.Fatalf("first login: renewable %v, %v (want the first token, renewable)", secret != nil && secret.Auth.Renewable, err)
	}
	if err := os.WriteFile(file, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		s.keepRenewed(ctx, secret) // returns when the token file changes (or ctx ends)
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second): // a deadline for the failure only; the pass does not wait
		cancel()
		<-ended
		t.Fatal("the token file was rotated before its watch started and the watch never saw it")
	}
	v.Must(t, "POST", "auth/token/revoke", map[string]any{"token": first})
	again, err := s.login(context.Background())
	if err != nil || again.Auth.ClientToken != second {
		t.Fatalf("login after the rotation: %v (want the second token)", err)
	}
	if got, err := s.fetchStatic(context.Background(), "tf", &policy.VaultRef{Path: "secret/data/tf", Field: "k"}); err != nil || got.Secret != "token-file-value" {
		t.Fatalf("fetch with the second token, the first revoked: %q, %v", got.Secret, err)
	}
}

// rootToken creates a renewable child token with the root policy and a 1h TTL.
func rootToken(t *testing.T, v *vaulttest.Server) string {
	t.Helper()
	out := v.Must(t, "POST", "auth/token/create", map[string]any{"policies": []string{"root"}, "ttl": "1h"})
	return out["auth"].(map[string]any)["client_token"].(string)
}

// TestKubernetesLogin checks the Kubernetes login request against a fake Vault (the real
// Kubernetes auth method needs a Kubernetes API server to review the JWT, which cannot run
// here): the role and the service-account JWT are sent to auth/<mount>/login, and the token
// Vault returns is used for reads.
func TestKubernetesLogin(t *testing.T) {
	var mu sync.Mutex
	var login map[string]any
	var readToken string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/v1/auth/k8s/login":
			_ = json.NewDecoder(r.Body).Decode(&login)
			_, _ = w.Write([]byte(`{"auth":{"client_token":"k8s-issued-token","renewable":false,"lease_duration":3600}}`))
		case "/v1/secret/data/app":
			readToken = r.Header.Get("X-Vault-Token")
			_, _ = w.Write([]byte(`{"data":{"data":{"k":"from-k8s-login"},"metadata":{"version":1}}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer fake.Close()
	src := startSource(t, Config{Address: fake.URL, Auth: AuthKubernetes, KubernetesRole: "agent",
		KubernetesJWTFile: writeFile(t, "jwt", "eyJhbGciOi.sa-jwt.sig"), KubernetesMount: "k8s"})
	got, err := src.Fetch(context.Background(), "app", kv("secret/data/app", "k", 0))
	if err != nil || got.Secret != "from-k8s-login" {
		t.Fatalf("fetch: %q, %v", got.Secret, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if login["role"] != "agent" || login["jwt"] != "eyJhbGciOi.sa-jwt.sig" || readToken != "k8s-issued-token" {
		t.Fatalf("login body %v, read token %q", login, readToken)
	}
}

// TestSealedVault: the real Vault, sealed mid-run, fails fetches (the broker then serves
// its cache or fails closed).
func TestSealedVault(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV(t, "s", map[string]any{"k": "sealed-test-value"})
	src := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, Token: v.RootToken})
	sec := kv("secret/data/s", "k", 0)
	if _, err := src.Fetch(context.Background(), "s", sec); err != nil {
		t.Fatal(err)
	}
	v.Must(t, "PUT", "sys/seal", nil)
	_, err := src.Fetch(context.Background(), "s", sec)
	if err == nil || !strings.Contains(err.Error(), "sealed") {
		t.Fatalf("got %v, want a sealed error", err)
	}
}

// TestIgnoresVaultEnvironment: VAULT_SKIP_VERIFY (and VAULT_ADDR) in the sidecar's
// environment change nothing; only Config does (cmd maps VAULT_ADDR to --vault-addr).
func TestIgnoresVaultEnvironment(t *testing.T) {
	v := vaulttest.Start(t)
	t.Setenv("VAULT_SKIP_VERIFY", "true")
	t.Setenv("VAULT_ADDR", "https://127.0.0.1:1")
	src, err := New(Config{Address: v.Address, Token: v.RootToken, Timeout: 2 * time.Second}) // no CA: Vault's cert must not verify
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	err = src.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("got %v, want a certificate verification error", err)
	}
}

// serviceAccountJWT makes an ES256-signed service-account token with the claims Vault's
// Kubernetes auth reads (the signature is checked by the TokenReview API, here the test's).
func serviceAccountJWT(t *testing.T, namespace, name, uid string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]string{"alg": "ES256", "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{
		"iss": "kubernetes/serviceaccount", "sub": "system:serviceaccount:" + namespace + ":" + name,
		"kubernetes.io/serviceaccount/namespace":            namespace,
		"kubernetes.io/serviceaccount/service-account.name": name,
		"kubernetes.io/serviceaccount/service-account.uid":  uid,
	})
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	digest := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + enc.EncodeToString(sig)
}

// TestKubernetesAuthRealVault logs in with Vault's real Kubernetes auth method. Kubernetes
// itself cannot run here: its TokenReview API is played by the test, answering for the one
// token it issued.
func TestKubernetesAuthRealVault(t *testing.T) {
	v := vaulttest.Start(t)
	jwt := serviceAccountJWT(t, "sandbox", "agent", "uid-1")
	var reviews atomic.Int32
	kube := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr struct {
			Spec struct{ Token string } `json:"spec"`
		}
		_ = json.NewDecoder(r.Body).Decode(&tr)
		if r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" || tr.Spec.Token != jwt {
			http.Error(w, `{"kind":"Status","status":"Failure","code":401}`, http.StatusUnauthorized)
			return
		}
		reviews.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{"authenticated":true,` +
			`"user":{"username":"system:serviceaccount:sandbox:agent","uid":"uid-1"}}}`))
	}))
	defer kube.Close()
	v.Must(t, "POST", "auth/kubernetes/config", map[string]any{"kubernetes_host": kube.URL,
		"disable_local_ca_jwt": true, "disable_iss_validation": true})
	v.Policy(t, "k8s-read", `path "secret/data/k8s" { capabilities = ["read"] }`)
	v.Must(t, "POST", "auth/kubernetes/role/agent", map[string]any{"bound_service_account_names": []string{"agent"},
		"bound_service_account_namespaces": []string{"sandbox"}, "token_policies": []string{"k8s-read"}, "token_ttl": "1h"})
	v.PutKV(t, "k8s", map[string]any{"k": "k8s-auth-value"})

	src := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, Auth: AuthKubernetes,
		KubernetesRole: "agent", KubernetesJWTFile: writeFile(t, "sa-token", jwt)})
	got, err := src.Fetch(context.Background(), "k8s", kv("secret/data/k8s", "k", 0))
	if err != nil || got.Secret != "k8s-auth-value" {
		t.Fatalf("fetch after kubernetes login: %q, %v", got.Secret, err)
	}
	if reviews.Load() == 0 {
		t.Fatal("vault never reviewed the token")
	}
	// A token Kubernetes does not vouch for is refused by Vault.
	bad := startSourceErr(t, Config{Address: v.Address, CACertFile: v.CACertFile, Auth: AuthKubernetes,
		KubernetesRole: "agent", KubernetesJWTFile: writeFile(t, "other", serviceAccountJWT(t, "sandbox", "agent", "uid-1"))})
	if bad == nil {
		t.Fatal("a token the TokenReview API rejects logged in")
	}
}

// startSourceErr starts a source and returns Start's error (the source is closed at the end).
func startSourceErr(t *testing.T, cfg Config) error {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s.Start(context.Background())
}
