package kube

import (
	"fmt"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/airlock-dev/airlock/policy"
)

// sidecarArgs are the arguments of "airlock run" in the sidecar. $(VAR) references are
// expanded by the kubelet from the sidecar's own env (the downward API variables below).
func (o *Options) sidecarArgs(s settings) []string {
	environment, policyKey := s.environment, s.policyKey
	loop := func(port int32) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	args := []string{
		"run",
		"--policy", path.Join(policyDir, policyKey),
		"--proxy-addr", loop(o.ProxyPort),
		// No transparent mode: an app that ignores the forced HTTP(S)_PROXY gets EPERM from
		// the kernel for a direct connect instead of being redirected.
		"--transparent-addr", "off",
		// Port 53 without a capability: the pod's net.ipv4.ip_unprivileged_port_start sysctl.
		"--dns-addr", "127.0.0.1:53",
		"--llm-addr", loop(o.LLMPort),
		// Loopback only: other pods never reach admin, metrics or the model API; the kubelet
		// probes with `airlock health` run inside this container.
		"--admin-addr", loop(o.AdminPort),
		"--state-dir", stateDir,
		// ebpf pin directory names allow letters, digits, '.', '_' and '-': namespaces have no
		// dots, so "namespace.name" is unambiguous.
		"--sandbox", "$(POD_NAMESPACE).$(POD_NAME)",
		"--environment", environment,
		"--upstream-dns", o.UpstreamDNS,
		// Kernel enforcement is the node agent's (airlock node, a DaemonSet): this container
		// holds no privilege. Its start waits for the agent's confirmation, so the startup
		// probe keeps the app containers from starting before the pod is enforced.
		"--node-agent",
		"--ca-bundle-out", CABundle,
		// Every app container runs without CAP_NET_RAW (dropNetRaw), so packet sockets are
		// out of its reach even where the BPF LSM cannot refuse them.
		"--packet-guard", "best-effort",
	}
	if len(s.identities) > 0 {
		// From the annotation at admission: container args are immutable, annotations not.
		args = append(args, "--identity-containers", policy.FormatIdentityMap(s.identities))
	}
	args = append(args, o.Audit.args(s.audit)...)
	return append(append(args, o.Vault.args()...), o.UpstreamProxy.args()...)
}

// sidecar is the injected native sidecar: an init container with restartPolicy Always, so it
// starts before every other container (its startup probe gates them) and stops after them.
// It runs with no privilege at all (Pod Security "restricted").
func (o *Options) sidecar(s settings) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	probe := func(p string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
				Command: []string{"airlock", "health", fmt.Sprintf("http://127.0.0.1:%d%s", o.AdminPort, p)},
			}},
			PeriodSeconds:    period,
			FailureThreshold: failures,
			TimeoutSeconds:   3,
		}
	}
	fieldEnv := func(name, field string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: field},
		}}
	}
	return corev1.Container{
		Name:            SidecarName,
		Image:           o.Image,
		ImagePullPolicy: corev1.PullPolicy(o.ImagePullPolicy),
		Command:         []string{"airlock"},
		Args:            o.sidecarArgs(s),
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_UID", "metadata.uid"),
			// The Go runtime collects before the kernel's OOM killer would act.
			{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{
				ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"},
			}},
		},
		// Startup gates the app containers: they start only once the policy is loaded, the
		// node agent has confirmed kernel enforcement of the pod and the CA bundle is written.
		StartupProbe:    probe("/readyz", 1, 120),
		ReadinessProbe:  probe("/readyz", 5, 3),
		LivenessProbe:   probe("/healthz", 10, 3),
		Resources:       *o.Resources.DeepCopy(),
		RestartPolicy:   &always,
		SecurityContext: restrictedContext(),
		VolumeMounts: append([]corev1.VolumeMount{
			{Name: volumePolicy, MountPath: policyDir, ReadOnly: true},
			{Name: volumeState, MountPath: stateDir},
			{Name: volumeCA, MountPath: CADir},
		}, append(append(o.Vault.mounts(), o.UpstreamProxy.mounts()...), o.Audit.mounts(s.audit)...)...),
	}
}

// restrictedContext is the sidecar's securityContext: everything Pod Security "restricted"
// asks, and a read-only root filesystem (its writable state is in emptyDirs).
func restrictedContext() *corev1.SecurityContext {
	yes, no := true, false
	return &corev1.SecurityContext{
		RunAsNonRoot:             &yes,
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// UnprivilegedPortSysctl lets the sidecar bind the DNS filter's port 53 without a capability.
// It is a namespaced sysctl Kubernetes counts as safe, so Pod Security "restricted" admits it.
const UnprivilegedPortSysctl = "net.ipv4.ip_unprivileged_port_start"

// sysctlOps sets UnprivilegedPortSysctl to 53 in the pod's securityContext, unless it is
// already 53 or lower.
func sysctlOps(pod *corev1.Pod) []PatchOp {
	want := corev1.Sysctl{Name: UnprivilegedPortSysctl, Value: "53"}
	sc := pod.Spec.SecurityContext
	switch {
	case sc == nil:
		return []PatchOp{add("/spec/securityContext", corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{want}})}
	case sc.Sysctls == nil:
		return []PatchOp{add("/spec/securityContext/sysctls", []corev1.Sysctl{want})}
	}
	for i, s := range sc.Sysctls {
		if s.Name != UnprivilegedPortSysctl {
			continue
		}
		if n, err := strconv.Atoi(s.Value); err == nil && n <= 53 {
			return nil
		}
		return []PatchOp{add(pointer("spec", "securityContext", "sysctls", index(i), "value"), "53")}
	}
	return []PatchOp{add("/spec/securityContext/sysctls/-", want)}
}

// volumes are the pod volumes the injection adds: no hostPath.
func volumes(policyConfigMap string) []corev1.Volume {
	readable := int32(0o444)
	caSize := resource.MustParse("4Mi")
	return []corev1.Volume{
		{Name: volumeCA, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: &caSize,
		}}},
		{Name: volumeState, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volumePolicy, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: policyConfigMap},
			DefaultMode:          &readable,
		}}},
	}
}

// appEnv is what every other container gets. Forced variables replace a value the container
// sets itself (a pod cannot opt out of the proxy or the CA bundle); defaulted ones are only
// added when the container does not set them (an app may point its SDK at another allowed
// endpoint).
func (o *Options) appEnv() (forced, defaulted []corev1.EnvVar) {
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", o.ProxyPort)
	noProxy := "localhost,127.0.0.1,::1,llm.airlock.internal"
	for _, n := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		forced = append(forced, corev1.EnvVar{Name: n, Value: proxyURL})
	}
	forced = append(forced, corev1.EnvVar{Name: "NO_PROXY", Value: noProxy}, corev1.EnvVar{Name: "no_proxy", Value: noProxy})
	for _, n := range []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"} {
		forced = append(forced, corev1.EnvVar{Name: n, Value: CABundle})
	}
	llm := fmt.Sprintf("http://127.0.0.1:%d", o.LLMPort)
	defaulted = []corev1.EnvVar{
		{Name: "OPENAI_BASE_URL", Value: llm + "/v1"},
		{Name: "ANTHROPIC_BASE_URL", Value: llm},
	}
	return forced, defaulted
}
