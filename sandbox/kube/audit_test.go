package kube

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func auditTestOptions() Options {
	o := testOptions()
	o.Audit = AuditOptions{SizeLimit: resource.MustParse("64Mi"), S3Bucket: "evidence", S3Prefix: "airlock",
		S3Endpoint: "http://s3.storage.svc:7070", S3CredentialsSecret: "airlock-s3", RetentionMode: "COMPLIANCE", Retention: 90 * 24 * time.Hour}
	return o
}

// TestAuditTrailInjected: the sidecar writes its chained log on the audit volume (an
// emptyDir with the size limit, or the annotated PVC), signs with the annotated Secret's
// key, and ships to the bucket under namespace/pod/UID with the backlog below the limit;
// the app containers get none of it, and the sidecar stays restricted.
func TestAuditTrailInjected(t *testing.T) {
	h := newTestHandler(t, auditTestOptions())
	pod := basePod()
	pod.Annotations[AnnotationAuditClaim] = "trail"
	pod.Annotations[AnnotationAuditKeySecret] = "team-a-audit-key"
	got := applyPatch(t, pod, admit(t, h, pod, "team-a"))
	sc := got.Spec.InitContainers[0]
	for flag, want := range map[string]string{
		"--audit-log": "/var/log/airlock/audit.log", "--audit-key": "/etc/airlock/audit-key/private.pem",
		"--audit-ship-s3-bucket": "evidence", "--audit-ship-s3-prefix": "airlock", "--audit-ship-s3-endpoint": "http://s3.storage.svc:7070",
		"--audit-ship-key-prefix":          "$(POD_NAMESPACE)/$(POD_NAME)/$(POD_UID)",
		"--audit-ship-s3-credentials-file": "/etc/airlock/audit-s3/credentials",
		"--audit-ship-retention-mode":      "COMPLIANCE",
		"--audit-ship-retention":           "2160h0m0s",
		"--audit-ship-backlog":             "50331648", // three quarters of 64Mi
		"--audit-max-bytes":                "4194304",
	} {
		if v, _ := argValue(sc.Args, flag); v != want {
			t.Errorf("sidecar %s = %q, want %q", flag, v, want)
		}
	}
	if envOf(sc)["POD_UID"] != "" || !hasFieldEnv(sc, "POD_UID", "metadata.uid") {
		t.Errorf("sidecar env %v: want POD_UID from metadata.uid", sc.Env)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range got.Spec.Volumes {
		vols[v.Name] = v
	}
	if c := vols[volumeAudit].PersistentVolumeClaim; c == nil || c.ClaimName != "trail" {
		t.Errorf("audit volume %+v, want the annotated PVC", vols[volumeAudit])
	}
	if s := vols[volumeAuditKey].Secret; s == nil || s.SecretName != "team-a-audit-key" || *s.DefaultMode != 0o444 {
		t.Errorf("signing key volume %+v, want Secret team-a-audit-key, 0444 (root's files, read by the non-root sidecar alone)", vols[volumeAuditKey])
	}
	for _, m := range sc.VolumeMounts {
		if (m.Name == volumeAuditKey || m.Name == volumeAuditCreds) && !m.ReadOnly {
			t.Errorf("sidecar mount %s is writable", m.Name)
		}
	}
	for _, c := range got.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == volumeAudit || m.Name == volumeAuditKey || m.Name == volumeAuditCreds {
				t.Errorf("app container %s mounts %s", c.Name, m.Name)
			}
		}
	}
	checkRestricted(t, sc.SecurityContext)
	o := auditTestOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if res, err := Mutate(got, "team-a", &o); err != nil || len(res.Patch) != 0 {
		t.Errorf("second pass: %v, %+v; want no change", err, res.Patch)
	}
	// A CSI driver by annotation: an inline volume of that driver.
	pod = basePod()
	pod.Annotations[AnnotationAuditCSIDriver] = "trail.csi.example.com"
	pod.Annotations[AnnotationAuditCSIAttributes] = "size=1Gi, class=worm"
	got = applyPatch(t, pod, admit(t, h, pod, "team-a"))
	for _, v := range got.Spec.Volumes {
		if v.Name == volumeAudit && (v.CSI == nil || v.CSI.Driver != "trail.csi.example.com" || v.CSI.VolumeAttributes["class"] != "worm" || v.CSI.VolumeAttributes["size"] != "1Gi") {
			t.Errorf("audit volume %+v, want the annotated CSI driver and attributes", v)
		}
	}
	// Without the annotation: the default emptyDir, with its size limit.
	pod = basePod()
	got = applyPatch(t, pod, admit(t, h, pod, "team-a"))
	for _, v := range got.Spec.Volumes {
		if v.Name == volumeAudit && (v.EmptyDir == nil || v.EmptyDir.SizeLimit.String() != "64Mi") {
			t.Errorf("default audit volume %+v, want an emptyDir of 64Mi", v)
		}
	}
}

func hasFieldEnv(c corev1.Container, name, field string) bool {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == field {
			return true
		}
	}
	return false
}

// TestAuditSecretsAndVolumeRefused: an app container that reaches for the signing key, the
// bucket's credentials or the trail's volume could forge checkpoints or rewrite its own
// trail: the pod is refused.
func TestAuditSecretsAndVolumeRefused(t *testing.T) {
	o := auditTestOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	secretVol := func(name string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}}
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
	}{
		{"signing key volume", secretVol("team-a-audit-key")},
		{"signing key env", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "team-a-audit-key"}, Key: AuditKeySecretKey}}}}
		}},
		{"bucket credentials", secretVol("airlock-s3")},
		{"the trail's PVC", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "trail"}}}}
		}},
		{"the audit volume", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: volumeAudit, MountPath: "/x"}}
		}},
		{"a bad annotation", func(p *corev1.Pod) { p.Annotations[AnnotationAuditKeySecret] = "../etc" }},
		{"a PVC and a CSI driver", func(p *corev1.Pod) { p.Annotations[AnnotationAuditCSIDriver] = "csi.example.com" }},
		{"CSI attributes without a driver", func(p *corev1.Pod) { p.Annotations[AnnotationAuditCSIAttributes] = "a=b" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			pod.Annotations[AnnotationAuditClaim] = "trail"
			if tc.name != "a bad annotation" {
				pod.Annotations[AnnotationAuditKeySecret] = "team-a-audit-key"
			}
			tc.edit(pod)
			if _, err := Mutate(pod, "team-a", &o); !errors.Is(err, ErrDenied) {
				t.Errorf("Mutate: %v, want a refusal", err)
			}
		})
	}
}

func TestAuditOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    AuditOptions
	}{
		{"bucket without credentials", AuditOptions{S3Bucket: "b"}},
		{"two credentials", AuditOptions{S3Bucket: "b", S3CredentialsSecret: "s", S3CredentialsVault: "secret/data/s3"}},
		{"vault credentials without vault", AuditOptions{S3Bucket: "b", S3CredentialsVault: "secret/data/s3"}},
		{"bad mode", AuditOptions{S3Bucket: "b", S3CredentialsSecret: "s", RetentionMode: "forever", Retention: time.Hour}},
		{"mode without period", AuditOptions{S3Bucket: "b", S3CredentialsSecret: "s", RetentionMode: "COMPLIANCE"}},
		{"credentials without bucket", AuditOptions{S3CredentialsSecret: "s"}},
		{"volume smaller than four rotations", AuditOptions{SizeLimit: resource.MustParse("8Mi")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.Audit = tc.a
			if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("Validate: %v, want ErrInvalidOptions", err)
			}
		})
	}
}

// TestAuditSigningTransitAnnotation: the annotation makes the sidecar sign checkpoints with
// the named Vault Transit key through its Vault login; without the webhook's Vault settings,
// with a Secret key too, or naming no MOUNT/KEY, the pod is refused.
func TestAuditSigningTransitAnnotation(t *testing.T) {
	o := auditTestOptions()
	o.Vault = VaultOptions{Address: "https://vault.vault.svc:8200", Role: "airlock"}
	h := newTestHandler(t, o)
	pod := basePod()
	pod.Annotations[AnnotationAuditSigningTransit] = "transit/team-a-audit"
	got := applyPatch(t, pod, admit(t, h, pod, "team-a"))
	sc := got.Spec.InitContainers[0]
	if v, _ := argValue(sc.Args, "--audit-sign"); v != "vault-transit:transit/team-a-audit" {
		t.Errorf("sidecar --audit-sign = %q, want vault-transit:transit/team-a-audit", v)
	}
	if _, ok := argValue(sc.Args, "--audit-key"); ok {
		t.Errorf("sidecar args %v: a local --audit-key beside the transit key", sc.Args)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*corev1.Pod, *Options)
		value string
	}{
		{"no vault", func(_ *corev1.Pod, o *Options) { o.Vault = VaultOptions{} }, "transit/k"},
		{"a secret key too", func(p *corev1.Pod, _ *Options) { p.Annotations[AnnotationAuditKeySecret] = "team-a-audit-key" }, "transit/k"},
		{"no mount", func(*corev1.Pod, *Options) {}, "k"},
		{"a dot-dot segment", func(*corev1.Pod, *Options) {}, "transit/../sys/k"},
		{"an argument", func(*corev1.Pod, *Options) {}, "transit/k --audit-key=/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := auditTestOptions()
			o.Vault = VaultOptions{Address: "https://vault.vault.svc:8200", Role: "airlock"}
			pod := basePod()
			pod.Annotations[AnnotationAuditSigningTransit] = tc.value
			tc.edit(pod, &o)
			if _, err := Mutate(pod, "team-a", &o); !errors.Is(err, ErrDenied) {
				t.Errorf("Mutate: %v, want a refusal", err)
			}
		})
	}
}
