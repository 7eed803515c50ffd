package kube

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/airlock-dev/airlock/policy"
)

// Options configure the injection. Image and UpstreamDNS are required; every other zero value
// takes the default named on its field. Validate fills the defaults and checks the rest.
type Options struct {
	// Image is the airlock image of the sidecar (required).
	Image string
	// ImagePullPolicy of the sidecar: Always, IfNotPresent or Never; empty leaves Kubernetes'
	// default.
	ImagePullPolicy string
	// UpstreamDNS is the resolver the sidecar itself uses (--upstream-dns), usually the
	// cluster DNS service, e.g. "10.96.0.10:53". Required: the pod's own resolv.conf points
	// at the sidecar's DNS filter, so the sidecar cannot use it.
	UpstreamDNS string
	// Environment is the sidecar's --environment when the pod does not choose a stricter one
	// with AnnotationEnvironment; empty means "production".
	Environment string
	// Namespace is the webhook's own namespace: pods there are never injected. Empty means
	// none is exempt.
	Namespace string
	// DefaultPolicyConfigMap is used when a pod has no AnnotationPolicy; empty means such a
	// pod is refused admission (fail closed).
	DefaultPolicyConfigMap string
	// ClusterDomain completes the pod's DNS search list; empty means "cluster.local".
	ClusterDomain string

	// Ports of the sidecar's listeners; zero means the defaults (proxy 3128, transparent
	// 15001, model API 4000, admin 9090). The DNS filter is always on 127.0.0.1:53, the only
	// port resolv.conf can name.
	ProxyPort, TransparentPort, LLMPort, AdminPort int32

	// Resources of the sidecar; nil means requests 50m CPU and 64Mi memory, limit 512Mi
	// memory.
	Resources *corev1.ResourceRequirements

	// Vault, when its Address is set, has the sidecars log in to Vault with Kubernetes auth;
	// the zero value leaves Vault off.
	Vault VaultOptions
	// UpstreamProxy, when its URL is set, chains the sidecars to a corporate proxy; the zero
	// value leaves them dialling directly.
	UpstreamProxy UpstreamProxyOptions
	// Audit is every sidecar's audit trail: its volume, rotation and shipping; the zero
	// value keeps a 256Mi emptyDir and ships nothing.
	Audit AuditOptions
}

// environments orders the environments from laxest to strictest.
var environments = map[string]int{"development": 0, "staging": 1, "production": 2}

// ErrInvalidOptions is returned (wrapped) by Validate.
var ErrInvalidOptions = errors.New("invalid webhook options")

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrInvalidOptions)
}

// Validate fills the defaults and checks the options; errors wrap ErrInvalidOptions.
func (o *Options) Validate() error {
	if o.Image == "" {
		return invalidf("sidecar image is required")
	}
	if o.UpstreamDNS == "" {
		return invalidf("upstream DNS is required (the cluster DNS service, e.g. 10.96.0.10:53): the pod's resolv.conf points at the sidecar itself")
	}
	// The sidecar parses --upstream-dns with policy.ParseUpstream: accept exactly what it
	// accepts, so a pod is never injected with a value its sidecar refuses.
	if _, err := policy.ParseUpstream(o.UpstreamDNS); err != nil {
		return invalidf("upstream DNS: %v", err)
	}
	switch corev1.PullPolicy(o.ImagePullPolicy) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return invalidf("image pull policy %q: use Always, IfNotPresent or Never", o.ImagePullPolicy)
	}
	if o.Environment == "" {
		o.Environment = "production"
	}
	if _, ok := environments[o.Environment]; !ok {
		return invalidf("environment %q: use production, staging or development", o.Environment)
	}
	if o.DefaultPolicyConfigMap != "" {
		if errs := validation.IsDNS1123Subdomain(o.DefaultPolicyConfigMap); len(errs) > 0 {
			return invalidf("default policy ConfigMap %q: %s", o.DefaultPolicyConfigMap, errs[0])
		}
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = "cluster.local"
	}
	for _, p := range []struct {
		v   *int32
		def int32
	}{{&o.ProxyPort, 3128}, {&o.TransparentPort, 15001}, {&o.LLMPort, 4000}, {&o.AdminPort, 9090}} {
		if *p.v == 0 {
			*p.v = p.def
		}
		if *p.v < 1 || *p.v > 65535 {
			return invalidf("port %d: use 1-65535", *p.v)
		}
	}
	if err := o.Vault.validate(); err != nil {
		return err
	}
	if err := o.UpstreamProxy.validate(o.Vault.Address); err != nil {
		return err
	}
	if err := o.Audit.validate(o.Vault.Address); err != nil {
		return err
	}
	if o.Resources == nil {
		o.Resources = &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("50m"),
				corev1.ResourceMemory: resource.MustParse("64Mi"),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		}
	}
	return nil
}
