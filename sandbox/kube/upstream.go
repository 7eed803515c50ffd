package kube

import (
	"net/url"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// UpstreamProxyOptions chain the injected sidecars to a corporate proxy (the sidecar's
// --upstream-proxy and companions). They are the webhook operator's flags: no pod annotation
// and no policy changes them. The zero value leaves the sidecars dialling directly.
type UpstreamProxyOptions struct {
	// URL is the proxy, http://host:port or https://host:port (--upstream-proxy). Empty
	// means none.
	URL string
	// NoProxy is the sidecar's --upstream-no-proxy: comma-separated host patterns and CIDRs
	// reached directly (the cluster's own services, Vault).
	NoProxy string
	// ByName is the sidecar's --upstream-proxy-by-name.
	ByName bool
	// CAConfigMap names a ConfigMap in the pod's namespace whose key "ca.crt" is the PEM of
	// the proxy's CA (an https:// proxy, or an inspecting one that re-signs origins); it is
	// mounted in the sidecar alone (--upstream-proxy-ca), which adds it to the app
	// containers' CA bundle. Empty means none.
	CAConfigMap string
	// AuthSecret names a Secret in the pod's namespace whose key "auth" is the proxy's Basic
	// credentials, user:password; it is mounted in the sidecar alone
	// (--upstream-proxy-auth-file) and no app container may use it. Not with AuthVault.
	AuthSecret string
	// AuthVault is the sidecar's --upstream-proxy-auth-vault: a Vault KV path with fields
	// username and password (needs Vault, and Vault's host in NoProxy).
	AuthVault string
}

// Paths of the upstream proxy's volumes in the sidecar.
const (
	volumeUpstreamCA   = "airlock-upstream-ca"   // CAConfigMap, sidecar only
	volumeUpstreamAuth = "airlock-upstream-auth" // AuthSecret, sidecar only
	upstreamCADir      = "/etc/airlock/upstream-ca"
	upstreamAuthDir    = "/var/run/secrets/airlock/upstream-proxy"
)

func (u *UpstreamProxyOptions) validate(vaultAddr string) error {
	if u.URL == "" {
		if u.NoProxy != "" || u.ByName || u.CAConfigMap != "" || u.AuthSecret != "" || u.AuthVault != "" {
			return invalidf("upstream proxy settings without a proxy: set --upstream-proxy")
		}
		return nil
	}
	p, err := url.Parse(u.URL)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Hostname() == "" || p.User != nil {
		return invalidf("upstream proxy %q: use http://host:port or https://host:port (credentials go in --upstream-proxy-auth-secret)", redactURL(u.URL))
	}
	for _, name := range []string{u.CAConfigMap, u.AuthSecret} {
		if name == "" {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return invalidf("upstream proxy object %q: %s", name, errs[0])
		}
	}
	switch {
	case u.AuthSecret != "" && u.AuthVault != "":
		return invalidf("upstream proxy credentials: --upstream-proxy-auth-secret and --upstream-proxy-auth-vault are exclusive")
	case u.AuthVault != "" && vaultAddr == "":
		return invalidf("upstream proxy credentials from Vault need --vault-addr")
	}
	return nil
}

// redactURL hides a URL's user information, which belongs in a Secret.
func redactURL(s string) string {
	if p, err := url.Parse(s); err == nil && p.User != nil {
		return p.Redacted()
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "xxxxx" + s[i:]
	}
	return s
}

// args are the sidecar's upstream proxy flags.
func (u *UpstreamProxyOptions) args() []string {
	if u.URL == "" {
		return nil
	}
	a := []string{"--upstream-proxy", u.URL}
	if u.NoProxy != "" {
		a = append(a, "--upstream-no-proxy", u.NoProxy)
	}
	if u.ByName {
		a = append(a, "--upstream-proxy-by-name")
	}
	if u.CAConfigMap != "" {
		a = append(a, "--upstream-proxy-ca", path.Join(upstreamCADir, "ca.crt"))
	}
	if u.AuthSecret != "" {
		a = append(a, "--upstream-proxy-auth-file", path.Join(upstreamAuthDir, "auth"))
	}
	if u.AuthVault != "" {
		a = append(a, "--upstream-proxy-auth-vault", u.AuthVault)
	}
	return a
}

// volumes are the pod volumes of the proxy's CA and credentials.
func (u *UpstreamProxyOptions) volumes() []corev1.Volume {
	// 0444: the sidecar runs as a non-root uid and Secret files are root's; only the sidecar
	// mounts this volume (mutate's sidecarOnly) and checkPod refuses app containers that reach
	// for the Secret, so readable by all is readable by the sidecar alone.
	readable := int32(0o444)
	var out []corev1.Volume
	if u.URL != "" && u.CAConfigMap != "" {
		out = append(out, corev1.Volume{Name: volumeUpstreamCA, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: u.CAConfigMap},
			Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			DefaultMode:          &readable,
		}}})
	}
	if u.URL != "" && u.AuthSecret != "" {
		out = append(out, corev1.Volume{Name: volumeUpstreamAuth, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  u.AuthSecret,
			Items:       []corev1.KeyToPath{{Key: "auth", Path: "auth"}},
			DefaultMode: &readable,
		}}})
	}
	return out
}

// mounts are the sidecar's mounts of those volumes.
func (u *UpstreamProxyOptions) mounts() []corev1.VolumeMount {
	var out []corev1.VolumeMount
	for _, v := range u.volumes() {
		dir := upstreamCADir
		if v.Name == volumeUpstreamAuth {
			dir = upstreamAuthDir
		}
		out = append(out, corev1.VolumeMount{Name: v.Name, MountPath: dir, ReadOnly: true})
	}
	return out
}

// checkPod refuses a pod that reaches for the proxy's credentials Secret itself (a volume,
// a projected source, env or envFrom): the sandbox never holds them.
func (u *UpstreamProxyOptions) checkPod(pod *corev1.Pod) error {
	if u.URL == "" {
		return nil
	}
	return refuseSecret(pod, u.AuthSecret, volumeUpstreamAuth, "the upstream proxy's credentials")
}
