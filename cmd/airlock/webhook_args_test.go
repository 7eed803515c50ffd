package main

import (
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-dev/airlock/sandbox/kube"
)

// TestInjectedSidecarArgsAreValidRunFlags parses the arguments the webhook gives the sidecar
// with airlock run's own flag set and validation, so the two cannot drift apart.
func TestInjectedSidecarArgsAreValidRunFlags(t *testing.T) {
	opts := kube.Options{Image: "airlock:test", UpstreamDNS: "10.96.0.10:53",
		Vault: kube.VaultOptions{Address: "https://vault.test:8200", Role: "agents", CAConfigMap: "vault-ca"},
		Audit: kube.AuditOptions{S3Bucket: "evidence", S3Prefix: "airlock", S3Endpoint: "https://s3.test", S3CredentialsSecret: "s3",
			RetentionMode: "COMPLIANCE", Retention: 2160 * time.Hour, FailClosed: true}}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1", Labels: map[string]string{kube.LabelInject: "true"},
			Annotations: map[string]string{kube.AnnotationPolicy: "p", kube.AnnotationAuditKeySecret: "team-a-key"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent"}}},
	}
	res, err := kube.Mutate(pod, "team-a", &opts)
	if err != nil {
		t.Fatal(err)
	}
	var sidecar *corev1.Container
	for _, op := range res.Patch {
		if cs, ok := op.Value.([]corev1.Container); ok && op.Path == "/spec/initContainers" {
			sidecar = &cs[0]
		}
	}
	if sidecar == nil {
		t.Fatalf("no sidecar in the patch %+v", res.Patch)
	}
	// What the kubelet does with $(VAR) references from the downward API.
	expand := strings.NewReplacer("$(POD_IP)", "10.1.2.3", "$(POD_NAMESPACE)", "team-a", "$(POD_NAME)", "agent-1", "$(POD_UID)", "0d1c-uid")
	args := make([]string, len(sidecar.Args))
	for i, a := range sidecar.Args {
		args[i] = expand.Replace(a)
	}
	if args[0] != "run" {
		t.Fatalf("sidecar runs %q, want run", args[0])
	}
	fs, cfg := runFlags(io.Discard)
	rest, err := fs.ParseArgs(args[1:], io.Discard, false)
	if err != nil || len(rest) != 0 {
		t.Fatalf("airlock run does not accept the injected arguments %q: %v (rest %q)", args, err, rest)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("airlock run refuses the injected arguments: %v", err)
	}
	if !cfg.NodeAgent || cfg.PodCgroup || cfg.TransparentAddr != "off" || cfg.CABundleOut != kube.CABundle ||
		cfg.Sandbox != "team-a.agent-1" || cfg.Environment != "production" || cfg.AdminAddr != "127.0.0.1:9090" {
		t.Errorf("parsed run config %+v", cfg)
	}
	if v := cfg.Vault; v.Addr != "https://vault.test:8200" || v.Auth != "kubernetes" || v.K8sRole != "agents" || v.K8sMount != "kubernetes" ||
		v.K8sJWTFile != "/var/run/secrets/airlock/vault/token" || v.CACert != "/etc/airlock/vault-ca/ca.crt" {
		t.Errorf("parsed Vault config %+v", v)
	}
	if cfg.AuditLog != "/var/log/airlock/audit.log" || cfg.Audit.Key != "/etc/airlock/audit-key/private.pem" || cfg.Audit.MaxBytes == 0 || cfg.Audit.MaxAge == 0 {
		t.Errorf("parsed audit config %q %+v", cfg.AuditLog, cfg.Audit)
	}
	if sh := cfg.Ship; sh.S3Bucket != "evidence" || sh.S3Prefix != "airlock" || sh.S3Endpoint != "https://s3.test" || sh.KeyPrefix != "team-a/agent-1/0d1c-uid" ||
		sh.S3CredentialsFile != "/etc/airlock/audit-s3/credentials" || sh.RetentionMode != "COMPLIANCE" || sh.RetentionPeriod != 2160*time.Hour ||
		!sh.FailClosed || sh.Backlog != 192<<20 {
		t.Errorf("parsed shipping config %+v", sh)
	}
}
