package kube

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/airlock-dev/airlock/policy"
)

// ErrDenied is wrapped by every error Mutate returns: the pod must not be admitted, and the
// message says why and what to change.
var ErrDenied = errors.New("airlock refuses the pod")

func deniedf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrDenied, fmt.Sprintf(format, a...))
}

// maxSandboxName is the longest sandbox name the sidecar's kernel enforcement accepts (the
// eBPF pin directory name).
const maxSandboxName = 64

// Result is what Mutate decided for an admitted pod.
type Result struct {
	// Patch is the JSON Patch that injects the sidecar; empty when the pod needs no change
	// (skipped, or already injected).
	Patch []PatchOp
	// Skipped says why the pod was left alone ("" when it is, or already was, injected).
	Skipped string
}

// Mutate decides whether pod, being created in namespace, gets the sidecar, and returns the
// patch that injects it. It is idempotent: on a pod it already injected it returns an empty
// patch (or only what a later mutation undid, such as a container added without the proxy
// environment). o must have passed Validate. Errors wrap ErrDenied.
func Mutate(pod *corev1.Pod, namespace string, o *Options) (Result, error) {
	if pod.Labels[LabelInject] != "true" {
		return Result{Skipped: fmt.Sprintf("no label %s=true", LabelInject)}, nil
	}
	if o.Namespace != "" && namespace == o.Namespace {
		return Result{Skipped: "pod is in the webhook's own namespace " + namespace}, nil
	}
	s, err := settingsFor(pod, namespace, o)
	if err != nil {
		return Result{}, err
	}
	if err := checkPod(pod); err != nil {
		return Result{}, err
	}
	if err := o.Vault.checkPod(pod); err != nil {
		return Result{}, err
	}
	if err := o.UpstreamProxy.checkPod(pod); err != nil {
		return Result{}, err
	}
	if err := o.Audit.checkPod(pod, s.audit); err != nil {
		return Result{}, err
	}
	want := o.sidecar(s)
	injected, err := hasSidecar(pod, want)
	if err != nil {
		return Result{}, err
	}
	var ops []PatchOp
	// Container patches come before the sidecar's insertion at initContainers[0], which
	// shifts the indexes of the pod's own init containers.
	ops = append(ops, o.containerOps(pod)...)
	if !injected {
		vols := append(append(volumes(s.policyConfigMap), o.Vault.volumes()...), o.UpstreamProxy.volumes()...)
		ops = append(ops, volumeOps(pod, append(vols, o.Audit.volumes(s.audit)...))...)
		if len(pod.Spec.InitContainers) == 0 {
			ops = append(ops, add("/spec/initContainers", []corev1.Container{want}))
		} else {
			ops = append(ops, add("/spec/initContainers/0", want))
		}
	}
	ops = append(ops, dnsOps(pod, namespace, o.ClusterDomain)...)
	ops = append(ops, sysctlOps(pod)...)
	for i, g := range pod.Spec.SchedulingGates {
		if g.Name == SchedulingGate { // gate names are unique in a pod (API validation)
			ops = append(ops, remove(pointer("spec", "schedulingGates", index(i))))
			break
		}
	}
	if pod.Annotations[AnnotationInjected] != "true" {
		if pod.Annotations == nil {
			ops = append(ops, add("/metadata/annotations", map[string]string{AnnotationInjected: "true"}))
		} else {
			ops = append(ops, add(pointer("metadata", "annotations", AnnotationInjected), "true"))
		}
	}
	return Result{Patch: ops}, nil
}

// settings are what a pod's annotations choose.
type settings struct {
	policyConfigMap, policyKey, environment string
	audit                                   auditSettings
	// identities is AnnotationIdentities, read: container name to identity.
	identities map[string]string
}

func settingsFor(pod *corev1.Pod, namespace string, o *Options) (settings, error) {
	s := settings{
		policyConfigMap: pod.Annotations[AnnotationPolicy],
		policyKey:       pod.Annotations[AnnotationPolicyKey],
		environment:     pod.Annotations[AnnotationEnvironment],
	}
	if s.policyConfigMap == "" {
		if o.DefaultPolicyConfigMap == "" {
			return s, deniedf("annotation %s is missing: name the ConfigMap (in this namespace) that holds the pod's egress policy", AnnotationPolicy)
		}
		s.policyConfigMap = o.DefaultPolicyConfigMap
	}
	if errs := validation.IsDNS1123Subdomain(s.policyConfigMap); len(errs) > 0 {
		return s, deniedf("annotation %s %q is not a ConfigMap name: %s", AnnotationPolicy, s.policyConfigMap, errs[0])
	}
	if s.policyKey == "" {
		s.policyKey = DefaultPolicyKey
	}
	// A ConfigMap key has no "/" and is not ".." (IsConfigMapKey), so the policy path stays
	// inside the policy volume.
	if errs := validation.IsConfigMapKey(s.policyKey); len(errs) > 0 {
		return s, deniedf("annotation %s %q is not a ConfigMap key: %s", AnnotationPolicyKey, s.policyKey, errs[0])
	}
	switch rank, ok := environments[s.environment]; {
	case s.environment == "":
		s.environment = o.Environment
	case !ok:
		return s, deniedf("annotation %s %q: use production, staging or development", AnnotationEnvironment, s.environment)
	case rank < environments[o.Environment]:
		return s, deniedf("annotation %s %q is laxer than the webhook's environment %q: a pod may only ask for a stricter one", AnnotationEnvironment, s.environment, o.Environment)
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "xxxxx" // the API server appends 5 characters
	}
	if n := len(namespace) + 1 + len(name); n > maxSandboxName {
		return s, deniedf("sandbox name %s.%s is %d characters, more than the %d the sidecar's kernel enforcement accepts: shorten the pod name", namespace, name, n, maxSandboxName)
	}
	var err error
	if s.identities, err = identitiesFor(pod); err != nil {
		return s, err
	}
	if s.audit, err = auditSettingsFor(pod); err != nil {
		return s, err
	}
	if s.audit.transit != "" && o.Vault.Address == "" {
		return s, deniedf("annotation %s needs the webhook's Vault settings (--vault-addr): the sidecar signs through its Vault login", AnnotationAuditSigningTransit)
	}
	return s, nil
}

// identitiesFor reads AnnotationIdentities: its syntax, and that every container it names
// is one of the pod's app containers. (Whether the policy defines each identity the
// sidecar checks at its start: the webhook reads nothing from the API, and the policy's
// ConfigMap may change after admission.)
func identitiesFor(pod *corev1.Pod) (map[string]string, error) {
	raw, ok := pod.Annotations[AnnotationIdentities]
	if !ok {
		return nil, nil
	}
	m, err := policy.ParseIdentityMap(raw)
	if err != nil {
		return nil, deniedf("annotation %s: %v", AnnotationIdentities, err)
	}
	if len(m) == 0 {
		return nil, deniedf("annotation %s is empty: map containers to identities, e.g. %q, or leave it out", AnnotationIdentities, "reviewer=reviewer,author=author")
	}
	var names []string
	for _, c := range appContainers(pod) {
		names = append(names, c.Name)
	}
	for c := range m {
		switch {
		case c == SidecarName:
			return nil, deniedf("annotation %s maps container %q, the airlock sidecar, which has no identity: map the pod's own containers", AnnotationIdentities, c)
		case !slices.Contains(names, c):
			return nil, deniedf("annotation %s maps container %q, which the pod does not have (its containers: %s)", AnnotationIdentities, c, strings.Join(names, ", "))
		}
	}
	return m, nil
}

// dangerousCaps are capabilities that would let an app container detach or bypass the
// sidecar's kernel enforcement (or reconfigure the pod's network namespace). NET_RAW is among
// them: packet sockets go past the cgroup programs where the BPF LSM is off, so the webhook
// drops it from every app container and refuses one that adds it back.
var dangerousCaps = []corev1.Capability{"ALL", "SYS_ADMIN", "NET_ADMIN", "BPF", "NET_RAW"}

// checkPod refuses pods in which the sidecar cannot confine the app containers, or whose
// containers reach for the sidecar's private volumes.
func checkPod(pod *corev1.Pod) error {
	if pod.Spec.HostNetwork {
		return deniedf("hostNetwork pods cannot be sandboxed: their traffic leaves through the node's network namespace")
	}
	if pod.Spec.HostPID || (pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace) {
		return deniedf("hostPID and shareProcessNamespace pods cannot be sandboxed: the app containers would see (and could signal) the sidecar's processes and reach its files through /proc")
	}
	sidecarOnly := []string{volumeState, volumePolicy, volumeVaultToken, volumeVaultCA, volumeUpstreamCA, volumeUpstreamAuth,
		volumeAudit, volumeAuditKey, volumeAuditCreds}
	for _, c := range appContainers(pod) {
		for _, m := range c.VolumeMounts {
			if slices.Contains(sidecarOnly, m.Name) {
				return deniedf("container %q mounts volume %q, which only the airlock sidecar may mount", c.Name, m.Name)
			}
			if m.MountPath == CADir && m.Name != volumeCA {
				return deniedf("container %q mounts %q at %s, where airlock puts its CA bundle", c.Name, m.Name, CADir)
			}
		}
		if sc := c.SecurityContext; sc != nil {
			if sc.Privileged != nil && *sc.Privileged {
				return deniedf("container %q is privileged: it could detach the sidecar's kernel enforcement", c.Name)
			}
			if sc.Capabilities != nil {
				for _, cp := range sc.Capabilities.Add {
					if slices.Contains(dangerousCaps, cp) || slices.Contains(dangerousCaps, "CAP_"+cp) {
						return deniedf("container %q adds capability %s: it could detach or bypass the sidecar's kernel enforcement", c.Name, cp)
					}
				}
			}
		}
	}
	return nil
}

// hasSidecar says whether the pod already carries the sidecar this webhook would inject. A
// container named like the sidecar that is not it (other image or arguments) is refused
// rather than trusted, so a pod cannot opt out by faking the injection.
func hasSidecar(pod *corev1.Pod, want corev1.Container) (bool, error) {
	for _, c := range pod.Spec.Containers {
		if c.Name == SidecarName {
			return false, deniedf("container name %q is reserved for the airlock sidecar", SidecarName)
		}
	}
	for i, c := range pod.Spec.InitContainers {
		if c.Name != SidecarName {
			continue
		}
		if i != 0 || c.Image != want.Image || !slices.Equal(c.Command, want.Command) || !slices.Equal(c.Args, want.Args) ||
			c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			return false, deniedf("init container %q is not the sidecar this webhook injects: rename it", SidecarName)
		}
		for _, v := range volumes("") {
			if !slices.ContainsFunc(pod.Spec.Volumes, func(pv corev1.Volume) bool { return pv.Name == v.Name }) {
				return false, deniedf("pod has the airlock sidecar but not its volume %q", v.Name)
			}
		}
		return true, nil
	}
	for _, v := range pod.Spec.Volumes {
		for _, ours := range append(volumes(""), corev1.Volume{Name: volumeVaultToken}, corev1.Volume{Name: volumeVaultCA},
			corev1.Volume{Name: volumeUpstreamCA}, corev1.Volume{Name: volumeUpstreamAuth},
			corev1.Volume{Name: volumeAudit}, corev1.Volume{Name: volumeAuditKey}, corev1.Volume{Name: volumeAuditCreds}) {
			if v.Name == ours.Name {
				return false, deniedf("volume name %q is reserved for the airlock sidecar", v.Name)
			}
		}
	}
	return false, nil
}

// appContainers are the pod's containers other than the sidecar: its containers and its own
// init containers (which run after the sidecar, inside the same enforcement).
func appContainers(pod *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.Name != SidecarName {
			out = append(out, c)
		}
	}
	return append(out, pod.Spec.Containers...)
}
