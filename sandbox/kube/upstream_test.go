package kube

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func upstreamTestOptions() Options {
	o := testOptions()
	o.UpstreamProxy = UpstreamProxyOptions{URL: "http://proxy.corp.test:3128", NoProxy: "*.svc.cluster.local,10.96.0.0/12",
		CAConfigMap: "corp-ca", AuthSecret: "corp-proxy"}
	return o
}

// TestUpstreamProxyOnlyInTheSidecar: the sidecar gets the proxy's flags and mounts its CA
// and credentials; no app container does, and a second pass changes nothing.
func TestUpstreamProxyOnlyInTheSidecar(t *testing.T) {
	h := newTestHandler(t, upstreamTestOptions())
	pod := basePod()
	got := applyPatch(t, pod, admit(t, h, pod, "team-a"))
	sidecar := got.Spec.InitContainers[0]
	for flag, want := range map[string]string{
		"--upstream-proxy": "http://proxy.corp.test:3128", "--upstream-no-proxy": "*.svc.cluster.local,10.96.0.0/12",
		"--upstream-proxy-ca": "/etc/airlock/upstream-ca/ca.crt", "--upstream-proxy-auth-file": "/var/run/secrets/airlock/upstream-proxy/auth",
	} {
		if v, _ := argValue(sidecar.Args, flag); v != want {
			t.Errorf("sidecar %s = %q, want %q", flag, v, want)
		}
	}
	mounted := map[string]string{}
	for _, m := range sidecar.VolumeMounts {
		mounted[m.Name] = m.MountPath
	}
	if mounted[volumeUpstreamCA] != upstreamCADir || mounted[volumeUpstreamAuth] != upstreamAuthDir {
		t.Errorf("sidecar mounts %v, want the upstream proxy's CA and credentials", mounted)
	}
	for _, v := range got.Spec.Volumes {
		if v.Name == volumeUpstreamAuth && (v.Secret == nil || v.Secret.SecretName != "corp-proxy" || *v.Secret.DefaultMode != 0o444) {
			t.Errorf("credentials volume %+v, want Secret corp-proxy, mode 0444 (the non-root sidecar reads it)", v)
		}
	}
	for _, c := range got.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.Name, "airlock-upstream") {
				t.Errorf("app container %s mounts %s", c.Name, m.Name)
			}
		}
	}
	o := upstreamTestOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if res, err := Mutate(got, "team-a", &o); err != nil || len(res.Patch) != 0 {
		t.Errorf("second pass: %v, %+v; want no change", err, res.Patch)
	}
}

// TestUpstreamProxyCredentialsRefused: a pod that reaches for the proxy's credentials Secret
// (volume, projection, env, envFrom, or the sidecar's volume) is refused.
func TestUpstreamProxyCredentialsRefused(t *testing.T) {
	o := upstreamTestOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	secretRef := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "corp-proxy"}, Key: "auth"}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
	}{
		{"secret volume", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "corp-proxy"}}}}
		}},
		{"projected", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "corp-proxy"}}}}}}}}
		}},
		{"env", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef}}}
		}},
		{"envFrom", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "corp-proxy"}}}}
		}},
		{"the sidecar's volume", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: volumeUpstreamAuth, MountPath: "/x"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			tc.edit(pod)
			if _, err := Mutate(pod, "team-a", &o); !errors.Is(err, ErrDenied) {
				t.Errorf("Mutate: %v, want a refusal", err)
			}
		})
	}
}

func TestUpstreamProxyOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		u     UpstreamProxyOptions
		vault string
		ok    bool
	}{
		{"off", UpstreamProxyOptions{}, "", true},
		{"settings without proxy", UpstreamProxyOptions{NoProxy: "a"}, "", false},
		{"credentials in the URL", UpstreamProxyOptions{URL: "http://u:secretpw@p:3128"}, "", false},
		{"socks", UpstreamProxyOptions{URL: "socks5://p:1080"}, "", false},
		{"bad secret name", UpstreamProxyOptions{URL: "http://p:3128", AuthSecret: "A B"}, "", false},
		{"two credential sources", UpstreamProxyOptions{URL: "http://p:3128", AuthSecret: "s", AuthVault: "secret/data/p"}, "https://v:8200", false},
		{"vault credentials without vault", UpstreamProxyOptions{URL: "http://p:3128", AuthVault: "secret/data/p"}, "", false},
		{"complete", UpstreamProxyOptions{URL: "https://p:3128", CAConfigMap: "ca", AuthSecret: "s", ByName: true}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.UpstreamProxy = tc.u
			if tc.vault != "" {
				o.Vault = VaultOptions{Address: tc.vault, Role: "r"}
			}
			err := o.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
				t.Errorf("Validate = %v, want ok %v", err, tc.ok)
			}
			if err != nil && strings.Contains(err.Error(), "secretpw") {
				t.Errorf("error %q shows the URL's password", err)
			}
		})
	}
}
