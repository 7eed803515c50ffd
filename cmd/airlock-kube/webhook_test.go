package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
)

// testServingCert writes a self-signed certificate for 127.0.0.1 (named cn) to dir and
// returns the files and a pool trusting it.
func testServingCert(t *testing.T, dir, cn string, mtime time.Time) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, data := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, mtime, mtime); err != nil { // a rotation within one clock tick still counts
			t.Fatal(err)
		}
	}
	leaf, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(leaf)
	return certFile, keyFile, pool
}

const testAdmissionReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
 "uid":"3f1c","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},
 "namespace":"team-a","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod",
 "metadata":{"generateName":"agent-","labels":{"airlock.dev/inject":"true"},"annotations":{"airlock.dev/policy":"agent-policy"}},
 "spec":{"containers":[{"name":"agent","image":"python:3.13"}]}}}}`

func TestWebhookServesAdmissionReviewsOverTLS(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Minute)
	certFile, keyFile, pool := testServingCert(t, dir, "first", base)
	_, cfg := webhookFlags(io.Discard)
	cfg.addr, cfg.certFile, cfg.keyFile = "127.0.0.1:0", certFile, keyFile
	cfg.opts.Image, cfg.opts.UpstreamDNS = "registry.test/airlock:v1", "10.96.0.10:53"
	log := logrus.New()
	var logs bytes.Buffer
	log.SetOutput(&logs)
	log.SetFormatter(&logrus.JSONFormatter{})

	ctx, cancel := context.WithCancel(context.Background())
	addrc, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() { done <- serveWebhook(ctx, cfg, log, func(a net.Addr) { addrc <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("webhook did not start: %v", err)
	}
	url := "https://" + addr.String() + "/mutate"

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Post(url, "application/json", strings.NewReader(testAdmissionReview))
	if err != nil {
		t.Fatalf("POST /mutate: %v", err)
	}
	var out admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || out.Response == nil {
		t.Fatalf("status %d, decode %v, response %+v", resp.StatusCode, err, out.Response)
	}
	if out.Response.UID != "3f1c" || !out.Response.Allowed || out.Response.PatchType == nil || *out.Response.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Errorf("response %+v, want uid 3f1c allowed with a JSONPatch", out.Response)
	}
	var ops []map[string]any
	if err := json.Unmarshal(out.Response.Patch, &ops); err != nil || len(ops) == 0 {
		t.Errorf("patch %s: %v", out.Response.Patch, err)
	}
	if !strings.Contains(string(out.Response.Patch), `"--node-agent"`) {
		t.Errorf("patch does not inject the sidecar with --node-agent: %s", out.Response.Patch)
	}

	// cert-manager rotates the key pair: a new connection gets the new certificate.
	_, _, pool2 := testServingCert(t, dir, "second", base.Add(time.Second))
	client2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool2}}}
	resp, err = client2.Get("https://" + addr.String() + "/healthz")
	if err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Subject.CommonName != "second" {
		t.Errorf("after rotation the server presents %v, want the second certificate", resp.TLS.PeerCertificates[0].Subject)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("graceful shutdown: %v", err)
	}
	for _, want := range []string{`"msg":"airlock webhook listening"`, `"msg":"airlock sidecar injected"`, `"msg":"TLS certificate reloaded"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}

func TestWebhookCommandErrors(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := testServingCert(t, dir, "x", time.Now())
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"webhook", "--help"}, 0, "airlock.dev/inject"},
		{"no TLS", []string{"webhook", "--image", "i", "--upstream-dns", "10.96.0.10:53"}, 1, "--tls-cert and --tls-key are required"},
		{"no image", []string{"webhook", "--tls-cert", certFile, "--tls-key", keyFile, "--upstream-dns", "10.96.0.10:53"}, 1, "image is required"},
		{"no upstream DNS", []string{"webhook", "--tls-cert", certFile, "--tls-key", keyFile, "--image", "i"}, 1, "upstream DNS is required"},
		{"bad pull policy", []string{"webhook", "--tls-cert", certFile, "--tls-key", keyFile, "--image", "i", "--image-pull-policy", "Sometimes", "--upstream-dns", "10.96.0.10:53"}, 1, "image pull policy"},
		{"missing key file", []string{"webhook", "--tls-cert", certFile, "--tls-key", filepath.Join(dir, "none"), "--image", "i", "--upstream-dns", "10.96.0.10:53"}, 1, "stat TLS file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := airlock(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("exit %d (want %d), output %q, want it to contain %q", code, tc.code, out+errOut, tc.want)
			}
		})
	}
	if _, out, _ := airlock(t, "--help"); !strings.Contains(out, "webhook") {
		t.Errorf("airlock --help does not list webhook:\n%s", out)
	}
}

func TestWebhookFlagsFromEnvironment(t *testing.T) {
	t.Setenv("AIRLOCK_UPSTREAM_DNS", "10.96.0.10:53")
	t.Setenv("AIRLOCK_DEFAULT_POLICY_CONFIGMAP", "fallback")
	fs, cfg := webhookFlags(io.Discard)
	if _, err := fs.ParseArgs([]string{"--image", "i"}, io.Discard, true); err != nil {
		t.Fatal(err)
	}
	if cfg.opts.UpstreamDNS != "10.96.0.10:53" || cfg.opts.DefaultPolicyConfigMap != "fallback" || cfg.opts.Image != "i" {
		t.Errorf("options %+v, want the AIRLOCK_* values", cfg.opts)
	}
}
