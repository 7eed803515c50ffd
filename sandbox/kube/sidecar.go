package kube

import (
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// sidecarArgs are the arguments of "airlock run" in the sidecar. $(VAR) references are
// expanded by the kubelet from the sidecar's own env (the downward API variables below).
func (o *Options) sidecarArgs(environment, policyKey string) []string {
	loop := func(port int32) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	args := []string{
		"run",
		"--policy", path.Join(policyDir, policyKey),
		"--proxy-addr", loop(o.ProxyPort),
		"--transparent-addr", loop(o.TransparentPort),
		"--dns-addr", "127.0.0.1:53",
		"--llm-addr", loop(o.LLMPort),
		// The kubelet probes the pod IP, not loopback, so the admin listener binds the pod
		// IP (bracketed: Go accepts [a.b.c.d]:port and [v6]:port alike). The sandbox's own
		// connects to it are not among the kernel's allowed listeners.
		"--admin-addr", fmt.Sprintf("[$(POD_IP)]:%d", o.AdminPort),
		"--state-dir", stateDir,
		// ebpf pin directory names allow letters, digits, '.', '_' and '-': namespaces have no
		// dots, so "namespace.name" is unambiguous.
		"--sandbox", "$(POD_NAMESPACE).$(POD_NAME)",
		"--environment", environment,
		"--upstream-dns", o.UpstreamDNS,
		"--pod-cgroup",
		"--cgroup-root", cgroupRootPath,
		"--ca-bundle-out", CABundle,
		// Every app container runs without CAP_NET_RAW (dropNetRaw), so packet sockets are
		// out of its reach even where the BPF LSM cannot refuse them.
		"--packet-guard", "best-effort",
	}
	return append(args, o.Vault.args()...)
}

// sidecar is the injected native sidecar: an init container with restartPolicy Always, so it
// starts before every other container (its startup probe gates them) and stops after them.
func (o *Options) sidecar(environment, policyKey string) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	privileged, root, nonRoot := true, int64(0), false
	probe := func(p string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: p, Port: intstr.FromInt32(o.AdminPort), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    period,
			FailureThreshold: failures,
			TimeoutSeconds:   2,
		}
	}
	fieldEnv := func(name, field string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: field},
		}}
	}
	hostToContainer := corev1.MountPropagationHostToContainer
	return corev1.Container{
		Name:            SidecarName,
		Image:           o.Image,
		ImagePullPolicy: corev1.PullPolicy(o.ImagePullPolicy),
		Command:         []string{"airlock"},
		Args:            o.sidecarArgs(environment, policyKey),
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_IP", "status.podIP"),
			// The Go runtime collects before the kernel's OOM killer would act.
			{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{
				ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"},
			}},
		},
		Ports: []corev1.ContainerPort{{Name: "airlock-admin", ContainerPort: o.AdminPort, Protocol: corev1.ProtocolTCP}},
		// Startup gates the app containers: they start only once the policy is loaded, the
		// kernel enforcement attached and the CA bundle written.
		StartupProbe:   probe("/readyz", 1, 120),
		ReadinessProbe: probe("/readyz", 5, 3),
		LivenessProbe:  probe("/healthz", 10, 3),
		Resources:      *o.Resources.DeepCopy(),
		RestartPolicy:  &always,
		// Attaching cgroup eBPF programs to the pod's cgroup, pinning them in the host's
		// bpffs and binding :53 need privileges (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN on the
		// host's cgroup hierarchy); privileged is the one setting every runtime honours.
		SecurityContext: &corev1.SecurityContext{
			Privileged:   &privileged,
			RunAsUser:    &root,
			RunAsNonRoot: &nonRoot,
		},
		VolumeMounts: append([]corev1.VolumeMount{
			{Name: volumePolicy, MountPath: policyDir, ReadOnly: true},
			{Name: volumeState, MountPath: stateDir},
			{Name: volumeCA, MountPath: CADir},
			{Name: volumeBPF, MountPath: bpfDir, MountPropagation: &hostToContainer},
			{Name: volumeCgroup, MountPath: cgroupRootPath, ReadOnly: true},
		}, o.Vault.mounts()...),
	}
}

// volumes are the pod volumes the injection adds.
func volumes(policyConfigMap string) []corev1.Volume {
	dir := corev1.HostPathDirectory
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
		{Name: volumeBPF, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: bpfDir, Type: &dir}}},
		{Name: volumeCgroup, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostCgroupDir, Type: &dir}}},
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
