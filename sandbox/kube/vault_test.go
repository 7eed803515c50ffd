package kube

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func vaultTestOptions() Options {
	o := testOptions()
	o.Vault = VaultOptions{Address: "https://vault.test:8200", Role: "agents", CAConfigMap: "vault-ca"}
	return o
}

// TestVaultTokenOnlyInTheSidecar: the sidecar gets Vault's flags and a projected token for
// Vault's audience; no app container mounts it (or the CA), and the pod gets nothing else.
func TestVaultTokenOnlyInTheSidecar(t *testing.T) {
	h := newTestHandler(t, vaultTestOptions())
	pod := basePod()
	pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
	got := applyPatch(t, pod, admit(t, h, pod, "team-a"))
	sidecar := got.Spec.InitContainers[0]
	for flag, want := range map[string]string{
		"--vault-addr": "https://vault.test:8200", "--vault-auth": "kubernetes", "--vault-k8s-role": "agents",
		"--vault-k8s-mount": "kubernetes", "--vault-k8s-jwt-file": "/var/run/secrets/airlock/vault/token",
		"--vault-ca-cert": "/etc/airlock/vault-ca/ca.crt",
	} {
		if v, _ := argValue(sidecar.Args, flag); v != want {
			t.Errorf("sidecar %s = %q, want %q", flag, v, want)
		}
	}
	mounted := map[string]string{}
	for _, m := range sidecar.VolumeMounts {
		mounted[m.Name] = m.MountPath
	}
	if mounted[volumeVaultToken] != vaultTokenDir || mounted[volumeVaultCA] != vaultCADir {
		t.Errorf("sidecar mounts %v, want the Vault token and CA", mounted)
	}
	var token *corev1.Volume
	for i, v := range got.Spec.Volumes {
		if v.Name == volumeVaultToken {
			token = &got.Spec.Volumes[i]
		}
	}
	if token == nil || token.Projected == nil || len(token.Projected.Sources) != 1 {
		t.Fatalf("no projected token volume in %+v", got.Spec.Volumes)
	}
	if sa := token.Projected.Sources[0].ServiceAccountToken; sa == nil || sa.Audience != "vault" || *sa.ExpirationSeconds != 600 {
		t.Errorf("projected token %+v, want audience vault, 600 s", sa)
	}
	for _, c := range append(got.Spec.InitContainers[1:], got.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.Name, "airlock-vault") || strings.HasPrefix(m.MountPath, "/var/run/secrets") {
				t.Errorf("app container %s mounts %s at %s", c.Name, m.Name, m.MountPath)
			}
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "VAULT") {
				t.Errorf("app container %s gets %s", c.Name, e.Name)
			}
		}
	}
	// Reinvocation changes nothing.
	o := vaultTestOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if res, err := Mutate(got, "team-a", &o); err != nil || len(res.Patch) != 0 {
		t.Errorf("second pass: %v, %+v; want no change", err, res.Patch)
	}
}

func TestVaultRefused(t *testing.T) {
	o := vaultTestOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	tokenVolume := func(name, audience string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: audience, Path: "t"}}},
		}}}
	}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
		want string
	}{
		{"own token for vault", func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{tokenVolume("mine", "vault")} }, `audience "vault"`},
		{"reserved volume name", func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{tokenVolume(volumeVaultToken, "other")} }, "reserved"},
		{"app mounts the token", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: volumeVaultToken, MountPath: "/t"}}
		}, "only the airlock sidecar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			tc.edit(pod)
			_, err := Mutate(pod, "team-a", &o)
			if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Mutate: %v, want a refusal containing %q", err, tc.want)
			}
		})
	}
	// A token for another audience (the pod's own API access) is the pod's business.
	pod := basePod()
	pod.Spec.Volumes = []corev1.Volume{tokenVolume("api", "https://kubernetes.default.svc")}
	if _, err := Mutate(pod, "team-a", &o); err != nil {
		t.Errorf("pod with an API token: %v", err)
	}
}

func TestVaultOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    VaultOptions
		ok   bool
	}{
		{"off", VaultOptions{}, true},
		{"role without address", VaultOptions{Role: "r"}, false},
		{"no role", VaultOptions{Address: "https://v:8200"}, false},
		{"not a URL", VaultOptions{Address: "vault:8200", Role: "r"}, false},
		{"short token", VaultOptions{Address: "https://v:8200", Role: "r", TokenSeconds: 60}, false},
		{"bad CA ConfigMap", VaultOptions{Address: "https://v:8200", Role: "r", CAConfigMap: "A B"}, false},
		{"complete", VaultOptions{Address: "https://v:8200", Role: "r", CAConfigMap: "vault-ca"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.Vault = tc.v
			err := o.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
				t.Errorf("Validate = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
