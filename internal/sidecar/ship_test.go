package sidecar

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/ship"
	"github.com/airlock-dev/airlock/test/s3test"
	"github.com/airlock-dev/airlock/test/vaulttest"
)

// A sidecar with --audit-ship-s3-* ships its sealed audit files through the operator's dial
// path to a real S3 server, keeps /readyz ready (saying how far it shipped) while S3 is
// down, and at Close seals the tail and ships it with a closing marker: the bucket then
// verifies as one closed chain, signed by the sidecar's key. The S3 secret never reaches a
// log line.
func TestAuditShippedToS3AndClosedAtShutdown(t *testing.T) {
	srv := s3test.Start(t)
	creds := func(context.Context) (string, string, string, error) { return srv.AccessKey, srv.SecretKey, "", nil }
	store, err := ship.NewS3Store(ship.S3Config{Bucket: "evidence", Endpoint: srv.Endpoint, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("evidence")}); err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "upstream says hi")
	}))
	defer upstream.Close()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, fmt.Sprintf(inprocPolicy, upstream.Listener.Addr().(*net.TCPAddr).Port))
	credFile := filepath.Join(t.TempDir(), "s3-credentials")
	if err := os.WriteFile(credFile, []byte(srv.AccessKey+":"+srv.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cfg := testConfig(t, file, &stderr)
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	cfg.Audit.MaxBytes = 1024
	cfg.Ship = ShipConfig{S3Bucket: "evidence", S3Prefix: "trails", S3Endpoint: srv.Endpoint,
		S3CredentialsFile: credFile, KeyPrefix: "ns1/pod-a/uid-1"}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	client := proxyClient(s.Addrs().Proxy)
	for range 10 {
		if status, _, _ := get(t, client, upstream.URL); status != http.StatusOK {
			t.Fatalf("allowed request: %d", status)
		}
		if status, _, _ := get(t, client, "http://denied.test/"); status != http.StatusForbidden {
			t.Fatalf("denied request: %d", status)
		}
	}
	srv.Stop()
	for range 5 { // S3 down: requests are still served
		if status, _, _ := get(t, client, upstream.URL); status != http.StatusOK {
			t.Fatalf("allowed request with S3 down: %d", status)
		}
	}
	status, body, _ := get(t, http.DefaultClient, "http://"+s.Addrs().Admin.String()+"/readyz")
	if status != http.StatusOK || !strings.Contains(body, "audit shipping") {
		t.Errorf("/readyz with S3 down: %d %q, want 200 saying how far shipping got", status, body)
	}
	_, metrics, _ := get(t, http.DefaultClient, "http://"+s.Addrs().Admin.String()+"/metrics")
	for _, m := range []string{"airlock_audit_ship_backlog_bytes", "airlock_audit_ship_backlog_files", "airlock_audit_ship_shipped_seq", "airlock_audit_ship_backlog_full", "airlock_audit_ship_failures"} {
		if !strings.Contains(metrics, "\n"+m+" ") {
			t.Errorf("/metrics has no %s", m)
		}
	}
	srv.Restart(t)
	client.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(cfg.StateDir, AuditKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.ParsePublicKey(b)
	if err != nil {
		t.Fatal(err)
	}
	chains, err := ship.Fetch(context.Background(), store, "trails/ns1/pod-a/uid-1/", t.TempDir())
	if err != nil || len(chains) != 1 {
		t.Fatalf("fetch: %d chains, %v; want 1", len(chains), err)
	}
	rep, err := chains[0].Verify(audit.VerifyOptions{Key: pub})
	if err != nil {
		t.Fatal(err)
	}
	if line, ok := chains[0].Verdict(rep); !ok || rep.Events < 25 {
		t.Fatalf("verdict %q with %d events, want intact, closed, every request", line, rep.Events)
	}
	if strings.Contains(stderr.String(), srv.SecretKey) {
		t.Error("the S3 secret key reached the sidecar's log")
	}
}

// With --audit-ship-s3-credentials-vault the bucket's keys come from a real Vault through the
// credential broker's Vault login; the tail and the closing marker ship at Close, after the
// broker has closed (and revoked its token), with the keys read before.
func TestAuditShippedWithS3KeysFromVault(t *testing.T) {
	v := vaulttest.Start(t)
	srv := s3test.Start(t)
	v.PutKV(t, "audit-s3", map[string]any{"access_key_id": srv.AccessKey, "secret_access_key": srv.SecretKey})
	creds := func(context.Context) (string, string, string, error) { return srv.AccessKey, srv.SecretKey, "", nil }
	store, err := ship.NewS3Store(ship.S3Config{Bucket: "vaulted", Endpoint: srv.Endpoint, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("vaulted")}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, fmt.Sprintf(inprocPolicy, 443))
	var stderr syncBuffer
	cfg := testConfig(t, file, &stderr)
	cfg.Vault = VaultConfig{Addr: v.Address, CACert: v.CACertFile, Auth: "token", Token: v.RootToken}
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	cfg.Audit.MaxBytes = 1024
	cfg.Ship = ShipConfig{S3Bucket: "vaulted", S3Endpoint: srv.Endpoint, S3CredentialsVault: "secret/data/audit-s3", KeyPrefix: "ns/pod/uid"}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	client := proxyClient(s.Addrs().Proxy)
	for range 15 {
		if status, _, _ := get(t, client, "http://denied.test/"); status != http.StatusForbidden {
			t.Fatalf("denied request: %d", status)
		}
	}
	client.CloseIdleConnections()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	chains, err := ship.Fetch(context.Background(), store, "", t.TempDir())
	if err != nil || len(chains) != 1 {
		t.Fatalf("fetch: %d chains, %v; want 1", len(chains), err)
	}
	rep, err := chains[0].Verify(audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if line, ok := chains[0].Verdict(rep); !ok || rep.Events < 15 {
		t.Fatalf("verdict %q with %d events, want intact and closed", line, rep.Events)
	}
	if strings.Contains(stderr.String(), srv.SecretKey) {
		t.Error("the S3 secret key from Vault reached the sidecar's log")
	}
}

// A sidecar that cannot reach S3 at shutdown gives up after --audit-ship-finish-timeout and
// logs the range it could not ship: the store will never hold the end of this chain, and
// the log is the only place that names it.
func TestAuditShipFailureAtShutdownNamesTheRange(t *testing.T) {
	srv := s3test.Start(t)
	creds := func(context.Context) (string, string, string, error) { return srv.AccessKey, srv.SecretKey, "", nil }
	store, err := ship.NewS3Store(ship.S3Config{Bucket: "evidence", Endpoint: srv.Endpoint, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("evidence")}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, fmt.Sprintf(inprocPolicy, 9))
	credFile := filepath.Join(t.TempDir(), "s3-credentials")
	if err := os.WriteFile(credFile, []byte(srv.AccessKey+":"+srv.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cfg := testConfig(t, file, &stderr)
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	cfg.Ship = ShipConfig{S3Bucket: "evidence", S3Endpoint: srv.Endpoint, S3CredentialsFile: credFile,
		KeyPrefix: "ns1/pod-b/uid-2", FinishTimeout: 300 * time.Millisecond}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	client := proxyClient(s.Addrs().Proxy)
	srv.Stop()
	for range 4 {
		if status, _, _ := get(t, client, "http://denied.test/"); status != http.StatusForbidden {
			t.Fatalf("denied request: %d", status)
		}
	}
	client.CloseIdleConnections()
	err = s.Close()
	if err == nil || !strings.Contains(err.Error(), "not shipped") {
		t.Fatalf("Close with S3 down: %v, want the unshipped range named", err)
	}
	logs := stderr.String()
	if !strings.Contains(logs, "audit shipping at shutdown failed") || !strings.Contains(logs, "seq 1..") {
		t.Errorf("the sidecar's log does not name the range it could not ship:\n%s", logs)
	}
}
