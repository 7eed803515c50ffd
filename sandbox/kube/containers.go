package kube

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// containerOps gives every app container (and the pod's own init containers) the proxy
// environment and the CA bundle mount; containers that already have both get no operation.
func (o *Options) containerOps(pod *corev1.Pod) []PatchOp {
	forced, defaulted := o.appEnv()
	var ops []PatchOp
	patch := func(field string, i int, c corev1.Container) {
		if env, changed := withEnv(c.Env, forced, defaulted); changed {
			ops = append(ops, add(pointer("spec", field, index(i), "env"), env))
		}
		if mounts, changed := withCAMount(c.VolumeMounts); changed {
			ops = append(ops, add(pointer("spec", field, index(i), "volumeMounts"), mounts))
		}
		if op, ok := dropNetRaw(pointer("spec", field, index(i)), c.SecurityContext); ok {
			ops = append(ops, op)
		}
	}
	for i, c := range pod.Spec.InitContainers {
		if c.Name != SidecarName {
			patch("initContainers", i, c)
		}
	}
	for i, c := range pod.Spec.Containers {
		patch("containers", i, c)
	}
	return ops
}

// withEnv returns env with the forced variables set (replacing the container's own value in
// place, so later $(VAR) references still see it) and the defaulted ones added when absent.
func withEnv(env, forced, defaulted []corev1.EnvVar) ([]corev1.EnvVar, bool) {
	out := slices.Clone(env)
	changed := false
	for _, f := range forced {
		i := slices.IndexFunc(out, func(e corev1.EnvVar) bool { return e.Name == f.Name })
		switch {
		case i < 0:
			out = append(out, f)
			changed = true
		case out[i].Value != f.Value || out[i].ValueFrom != nil:
			out[i] = f
			changed = true
		}
	}
	for _, d := range defaulted {
		if !slices.ContainsFunc(out, func(e corev1.EnvVar) bool { return e.Name == d.Name }) {
			out = append(out, d)
			changed = true
		}
	}
	return out, changed
}

// withCAMount returns mounts with the CA volume mounted read-only at CADir.
func withCAMount(mounts []corev1.VolumeMount) ([]corev1.VolumeMount, bool) {
	want := corev1.VolumeMount{Name: volumeCA, MountPath: CADir, ReadOnly: true}
	out := slices.Clone(mounts)
	i := slices.IndexFunc(out, func(m corev1.VolumeMount) bool { return m.Name == volumeCA })
	switch {
	case i < 0:
		return append(out, want), true
	case out[i].MountPath != CADir || !out[i].ReadOnly || out[i].SubPath != "" || out[i].SubPathExpr != "":
		out[i] = want // read-only, whole volume: no subPath tricks
		return out, true
	}
	return out, false
}

// volumeOps adds the sidecar's volumes.
func volumeOps(pod *corev1.Pod, vols []corev1.Volume) []PatchOp {
	if len(pod.Spec.Volumes) == 0 {
		return []PatchOp{add("/spec/volumes", vols)}
	}
	ops := make([]PatchOp, 0, len(vols))
	for _, v := range vols {
		ops = append(ops, add("/spec/volumes/-", v))
	}
	return ops
}

// dnsOps points the pod's resolver at the sidecar's DNS filter (127.0.0.1:53) with
// dnsPolicy None, keeping the search list and options the pod would have had.
func dnsOps(pod *corev1.Pod, namespace, clusterDomain string) []PatchOp {
	cur := pod.Spec.DNSConfig
	if pod.Spec.DNSPolicy == corev1.DNSNone && cur != nil && slices.Equal(cur.Nameservers, []string{"127.0.0.1"}) {
		return nil
	}
	cfg := &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}
	if cur != nil {
		cfg.Searches, cfg.Options = cur.Searches, cur.Options
	}
	if pod.Spec.DNSPolicy != corev1.DNSNone || cfg.Searches == nil {
		// What ClusterFirst would have put in resolv.conf, before the pod's own additions.
		cfg.Searches = append([]string{namespace + ".svc." + clusterDomain, "svc." + clusterDomain, clusterDomain}, cfg.Searches...)
	}
	if !slices.ContainsFunc(cfg.Options, func(o corev1.PodDNSConfigOption) bool { return o.Name == "ndots" }) {
		five := "5"
		cfg.Options = append(cfg.Options, corev1.PodDNSConfigOption{Name: "ndots", Value: &five})
	}
	return []PatchOp{add("/spec/dnsPolicy", corev1.DNSNone), add("/spec/dnsConfig", cfg)}
}

// dropNetRaw returns the operation that drops CAP_NET_RAW from a container (at path), unless
// it already drops it (or ALL). Without it a container could open packet sockets, which the
// kernel programs do not see without the BPF LSM; with it the sidecar can run with
// --packet-guard best-effort on nodes where the BPF LSM is off (most of them).
func dropNetRaw(path string, sc *corev1.SecurityContext) (PatchOp, bool) {
	drop := []corev1.Capability{"NET_RAW"}
	switch {
	case sc == nil:
		return add(path+"/securityContext", corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: drop}}), true
	case sc.Capabilities == nil:
		return add(path+"/securityContext/capabilities", corev1.Capabilities{Drop: drop}), true
	}
	for _, c := range sc.Capabilities.Drop {
		switch c {
		case "NET_RAW", "CAP_NET_RAW", "ALL":
			return PatchOp{}, false
		}
	}
	return add(path+"/securityContext/capabilities/drop", append(slices.Clone(sc.Capabilities.Drop), drop...)), true
}
