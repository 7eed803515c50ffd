package kube

import (
	"net/url"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// VaultOptions make every injected sidecar log in to Vault with Kubernetes auth, using a
// service-account token projected into the sidecar alone (the app containers never see it),
// so that `vault:` secrets of the pod's policy can be injected. The zero value (no Address)
// leaves Vault off.
type VaultOptions struct {
	// Address is Vault's URL, e.g. "https://vault.vault.svc:8200" (the sidecar's
	// --vault-addr). Empty means no Vault.
	Address string
	// Role is the Vault role of the Kubernetes auth method (--vault-k8s-role); required with
	// Address. Bind it to the sandbox pods' service accounts and namespaces, and to
	// Audience.
	Role string
	// AuthMount is the Kubernetes auth mount path (--vault-k8s-mount); empty means
	// "kubernetes".
	AuthMount string
	// Audience of the projected token; empty means "vault". The Vault role must require it
	// (audience=...), so that no other token of the pod (such as an automounted API token)
	// logs in.
	Audience string
	// TokenSeconds is the projected token's lifetime; zero means 600 (the kubelet renews it
	// at 80%; the API server's minimum is 600).
	TokenSeconds int64
	// CAConfigMap names a ConfigMap in the pod's namespace whose key "ca.crt" is the PEM of
	// the CA that signs Vault's certificate (trust-manager can distribute one to every
	// namespace); empty means the image's CA bundle.
	CAConfigMap string
}

// Paths of the Vault volumes in the sidecar.
const (
	volumeVaultToken = "airlock-vault-token" // projected service-account token, sidecar only
	volumeVaultCA    = "airlock-vault-ca"    // CAConfigMap, sidecar only
	vaultTokenDir    = "/var/run/secrets/airlock/vault"
	vaultCADir       = "/etc/airlock/vault-ca"
)

func (v *VaultOptions) validate() error {
	if v.Address == "" {
		if v.Role != "" || v.CAConfigMap != "" {
			return invalidf("vault role or CA ConfigMap without a vault address: set --vault-addr")
		}
		return nil
	}
	u, err := url.Parse(v.Address)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return invalidf("vault address %q: use a URL such as https://vault.vault.svc:8200", v.Address)
	}
	if v.Role == "" {
		return invalidf("vault address without a role: set --vault-k8s-role (the Kubernetes auth role of the sandbox pods)")
	}
	if v.AuthMount == "" {
		v.AuthMount = "kubernetes"
	}
	if v.Audience == "" {
		v.Audience = "vault"
	}
	if v.TokenSeconds == 0 {
		v.TokenSeconds = 600
	}
	if v.TokenSeconds < 600 {
		return invalidf("vault token lifetime %ds: the API server's minimum is 600", v.TokenSeconds)
	}
	if v.CAConfigMap != "" {
		if errs := validation.IsDNS1123Subdomain(v.CAConfigMap); len(errs) > 0 {
			return invalidf("vault CA ConfigMap %q: %s", v.CAConfigMap, errs[0])
		}
	}
	return nil
}

// args are the sidecar's Vault flags.
func (v *VaultOptions) args() []string {
	if v.Address == "" {
		return nil
	}
	a := []string{
		"--vault-addr", v.Address,
		"--vault-auth", "kubernetes",
		"--vault-k8s-role", v.Role,
		"--vault-k8s-mount", v.AuthMount,
		"--vault-k8s-jwt-file", path.Join(vaultTokenDir, "token"),
	}
	if v.CAConfigMap != "" {
		a = append(a, "--vault-ca-cert", path.Join(vaultCADir, "ca.crt"))
	}
	return a
}

// volumes are the pod volumes the sidecar's Vault login needs.
func (v *VaultOptions) volumes() []corev1.Volume {
	if v.Address == "" {
		return nil
	}
	readable := int32(0o444)
	out := []corev1.Volume{{Name: volumeVaultToken, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: v.Audience, ExpirationSeconds: &v.TokenSeconds, Path: "token",
		}}},
	}}}}
	if v.CAConfigMap != "" {
		out = append(out, corev1.Volume{Name: volumeVaultCA, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: v.CAConfigMap},
			Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			DefaultMode:          &readable,
		}}})
	}
	return out
}

// mounts are the sidecar's mounts of those volumes.
func (v *VaultOptions) mounts() []corev1.VolumeMount {
	if v.Address == "" {
		return nil
	}
	out := []corev1.VolumeMount{{Name: volumeVaultToken, MountPath: vaultTokenDir, ReadOnly: true}}
	if v.CAConfigMap != "" {
		out = append(out, corev1.VolumeMount{Name: volumeVaultCA, MountPath: vaultCADir, ReadOnly: true})
	}
	return out
}

// checkPod refuses a pod that projects a token for Vault's audience itself: an app container
// holding one could log in to Vault as the sidecar does and read the secrets the sidecar
// keeps out of the pod.
func (v *VaultOptions) checkPod(pod *corev1.Pod) error {
	if v.Address == "" {
		return nil
	}
	for _, vol := range pod.Spec.Volumes {
		if vol.Projected == nil || vol.Name == volumeVaultToken {
			continue
		}
		for _, src := range vol.Projected.Sources {
			if t := src.ServiceAccountToken; t != nil && t.Audience == v.Audience {
				return deniedf("volume %q projects a service-account token for audience %q, which only the airlock sidecar may hold (it logs in to Vault with it)", vol.Name, v.Audience)
			}
		}
	}
	return nil
}
