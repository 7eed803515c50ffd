package kube

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestInjectsSidecar(t *testing.T) {
	h := newTestHandler(t, testOptions())
	pod := basePod()
	resp := admit(t, h, pod, "team-a")
	if !strings.Contains(string(resp.Patch), `"/metadata/annotations/airlock.dev~1injected"`) {
		t.Errorf("patch does not escape the annotation key's '/': %s", resp.Patch)
	}
	got := applyPatch(t, pod, resp)

	if n := len(got.Spec.InitContainers); n != 1 {
		t.Fatalf("init containers: got %d, want 1 (the sidecar)", n)
	}
	sc := got.Spec.InitContainers[0]
	if sc.Name != SidecarName || sc.Image != "registry.test/airlock:v1" {
		t.Errorf("sidecar %s %s, want %s registry.test/airlock:v1", sc.Name, sc.Image, SidecarName)
	}
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("sidecar restartPolicy %v, want Always (native sidecar)", sc.RestartPolicy)
	}
	if !slices.Equal(sc.Command, []string{"airlock"}) || len(sc.Args) == 0 || sc.Args[0] != "run" {
		t.Errorf("sidecar runs %v %v, want airlock run ...", sc.Command, sc.Args)
	}
	for flag, want := range map[string]string{
		"--policy":           "/etc/airlock/policy/policy.yaml",
		"--proxy-addr":       "127.0.0.1:3128",
		"--transparent-addr": "off",
		"--dns-addr":         "127.0.0.1:53",
		"--llm-addr":         "127.0.0.1:4000",
		"--admin-addr":       "127.0.0.1:9090",
		"--state-dir":        "/var/lib/airlock",
		"--sandbox":          "$(POD_NAMESPACE).$(POD_NAME)",
		"--environment":      "production",
		"--upstream-dns":     "10.96.0.10:53",
		"--ca-bundle-out":    "/etc/airlock/ca/ca-bundle.pem",
		"--node-agent":       "--ca-bundle-out",
	} {
		if got, ok := argValue(sc.Args, flag); !ok || got != want {
			t.Errorf("sidecar %s: got %q (present %v), want %q", flag, got, ok, want)
		}
	}
	for name, p := range map[string]*corev1.Probe{"startup": sc.StartupProbe, "readiness": sc.ReadinessProbe, "liveness": sc.LivenessProbe} {
		if p == nil || p.Exec == nil || len(p.Exec.Command) != 3 || p.Exec.Command[1] != "health" || !strings.HasPrefix(p.Exec.Command[2], "http://127.0.0.1:9090/") {
			t.Errorf("sidecar %s probe %+v, want exec airlock health http://127.0.0.1:9090/...", name, p)
		}
	}
	checkRestricted(t, sc.SecurityContext)
	if got.Spec.SecurityContext == nil || !slices.Contains(got.Spec.SecurityContext.Sysctls, corev1.Sysctl{Name: UnprivilegedPortSysctl, Value: "53"}) {
		t.Errorf("pod securityContext %+v, want the sysctl %s=53 (port 53 without a capability)", got.Spec.SecurityContext, UnprivilegedPortSysctl)
	}
	if !slices.ContainsFunc(sc.Env, func(e corev1.EnvVar) bool {
		return e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
	}) {
		t.Errorf("sidecar env %v: want GOMEMLIMIT from its memory limit", sc.Env)
	}
	if sc.Resources.Limits.Memory().IsZero() {
		t.Errorf("sidecar has no memory limit")
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range sc.VolumeMounts {
		mounts[m.Name] = m
	}
	for name, path := range map[string]string{volumePolicy: "/etc/airlock/policy", volumeState: "/var/lib/airlock", volumeCA: CADir, volumeAudit: auditDir} {
		if mounts[name].MountPath != path {
			t.Errorf("sidecar mount %s at %q, want %q", name, mounts[name].MountPath, path)
		}
	}
	if mounts[volumeCA].ReadOnly {
		t.Errorf("sidecar must write the CA bundle: its %s mount is read-only", volumeCA)
	}

	vols := map[string]corev1.Volume{}
	for _, v := range got.Spec.Volumes {
		vols[v.Name] = v
	}
	if cm := vols[volumePolicy].ConfigMap; cm == nil || cm.Name != "agent-policy" {
		t.Errorf("policy volume %+v, want ConfigMap agent-policy", vols[volumePolicy])
	}
	if vols[volumeCA].EmptyDir == nil || vols[volumeState].EmptyDir == nil {
		t.Errorf("CA and state volumes must be emptyDirs: %+v %+v", vols[volumeCA], vols[volumeState])
	}
	if len(sc.VolumeMounts) != 4 {
		t.Errorf("sidecar mounts %+v, want only the policy, state, CA and audit volumes", sc.VolumeMounts)
	}
	if a := vols[volumeAudit].EmptyDir; a == nil || a.SizeLimit == nil || a.SizeLimit.String() != "256Mi" {
		t.Errorf("audit volume %+v, want an emptyDir with the default 256Mi sizeLimit", vols[volumeAudit])
	}
	if v, _ := argValue(sc.Args, "--audit-log"); v != auditDir+"/audit.log" {
		t.Errorf("--audit-log %q, want the log on the audit volume", v)
	}
	for _, v := range got.Spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a hostPath: the injected pod must have none", v.Name)
		}
	}

	app := got.Spec.Containers[0]
	env := envOf(app)
	for name, want := range map[string]string{
		"FOO":                 "bar",
		"HTTP_PROXY":          "http://127.0.0.1:3128", // the container's own value is overridden
		"HTTPS_PROXY":         "http://127.0.0.1:3128",
		"http_proxy":          "http://127.0.0.1:3128",
		"https_proxy":         "http://127.0.0.1:3128",
		"NO_PROXY":            "localhost,127.0.0.1,::1,llm.airlock.internal",
		"no_proxy":            "localhost,127.0.0.1,::1,llm.airlock.internal",
		"SSL_CERT_FILE":       CABundle,
		"NODE_EXTRA_CA_CERTS": CABundle,
		"REQUESTS_CA_BUNDLE":  CABundle,
		"GIT_SSL_CAINFO":      CABundle,
		"CURL_CA_BUNDLE":      CABundle,
		"OPENAI_BASE_URL":     "http://127.0.0.1:4000/v1",
		"ANTHROPIC_BASE_URL":  "http://127.0.0.1:4000",
	} {
		if env[name] != want {
			t.Errorf("app env %s: got %q, want %q", name, env[name], want)
		}
	}
	if len(app.Env) != 14 {
		t.Errorf("app env has %d entries, want 14 (no duplicates): %v", len(app.Env), app.Env)
	}
	if !slices.ContainsFunc(app.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == volumeCA && m.MountPath == CADir && m.ReadOnly
	}) {
		t.Errorf("app mounts %v, want %s read-only at %s", app.VolumeMounts, volumeCA, CADir)
	}
	for _, m := range app.VolumeMounts {
		if m.Name == volumeState {
			t.Errorf("app container mounts the sidecar state (CA key)")
		}
	}

	if got.Spec.DNSPolicy != corev1.DNSNone || got.Spec.DNSConfig == nil || !slices.Equal(got.Spec.DNSConfig.Nameservers, []string{"127.0.0.1"}) {
		t.Errorf("DNS: policy %q config %+v, want None with nameserver 127.0.0.1", got.Spec.DNSPolicy, got.Spec.DNSConfig)
	} else {
		if want := []string{"team-a.svc.cluster.local", "svc.cluster.local", "cluster.local"}; !slices.Equal(got.Spec.DNSConfig.Searches, want) {
			t.Errorf("DNS searches %v, want %v", got.Spec.DNSConfig.Searches, want)
		}
		if o := got.Spec.DNSConfig.Options; len(o) != 1 || o[0].Name != "ndots" || *o[0].Value != "5" {
			t.Errorf("DNS options %v, want ndots:5", o)
		}
	}
	if got.Annotations[AnnotationInjected] != "true" || got.Annotations[AnnotationPolicy] != "agent-policy" {
		t.Errorf("annotations %v, want %s=true and the policy annotation kept", got.Annotations, AnnotationInjected)
	}

	// Idempotence: the API server may call the webhook again on the mutated pod.
	again := admit(t, h, got, "team-a")
	if !again.Allowed || len(again.Patch) != 0 {
		t.Errorf("second review: allowed %v, patch %s; want allowed with no patch", again.Allowed, again.Patch)
	}
}

func TestReinvocationPatchesOnlyANewContainer(t *testing.T) {
	h := newTestHandler(t, testOptions())
	pod := basePod()
	injected := applyPatch(t, pod, admit(t, h, pod, "team-a"))
	// Another webhook added a container after airlock's injection.
	injected.Spec.Containers = append(injected.Spec.Containers, corev1.Container{Name: "late", Image: "busybox"})
	resp := admit(t, h, injected, "team-a")
	got := applyPatch(t, injected, resp)
	late := got.Spec.Containers[1]
	if envOf(late)["HTTPS_PROXY"] != "http://127.0.0.1:3128" || len(late.VolumeMounts) != 1 {
		t.Errorf("late container env %v mounts %v, want the proxy env and the CA mount", late.Env, late.VolumeMounts)
	}
	if len(got.Spec.InitContainers) != 1 || len(got.Spec.Volumes) != len(injected.Spec.Volumes) {
		t.Errorf("re-invocation added a second sidecar or volumes: %d init containers, %d volumes", len(got.Spec.InitContainers), len(got.Spec.Volumes))
	}
}

func TestExistingInitContainersVolumesAndDNS(t *testing.T) {
	h := newTestHandler(t, Options{Image: "airlock:v1", UpstreamDNS: "10.96.0.10:53", Environment: "development", DefaultPolicyConfigMap: "fallback"})
	pod := basePod()
	pod.Annotations = map[string]string{AnnotationEnvironment: "staging", AnnotationPolicyKey: "strict.yaml", "team/owner": "a~b"}
	pod.Spec.InitContainers = []corev1.Container{{Name: "fetch", Image: "alpine/git"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod.Spec.DNSPolicy = corev1.DNSNone
	pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.53"}, Searches: []string{"corp.test"}}
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.test/quota"}, {Name: SchedulingGate}}
	got := applyPatch(t, pod, admit(t, h, pod, "team-b"))

	if g := got.Spec.SchedulingGates; len(g) != 1 || g[0].Name != "example.test/quota" {
		t.Errorf("scheduling gates %v, want airlock's removed and the other kept", g)
	}
	if n := len(got.Spec.InitContainers); n != 2 || got.Spec.InitContainers[0].Name != SidecarName || got.Spec.InitContainers[1].Name != "fetch" {
		t.Fatalf("init containers %d, want the sidecar first then fetch", n)
	}
	sc := got.Spec.InitContainers[0]
	if v, _ := argValue(sc.Args, "--environment"); v != "staging" {
		t.Errorf("--environment %q, want staging (stricter than the webhook's development)", v)
	}
	if v, _ := argValue(sc.Args, "--policy"); v != "/etc/airlock/policy/strict.yaml" {
		t.Errorf("--policy %q, want the annotated key", v)
	}
	if envOf(got.Spec.InitContainers[1])["HTTPS_PROXY"] != "http://127.0.0.1:3128" {
		t.Errorf("the pod's own init container did not get the proxy env")
	}
	if len(got.Spec.Volumes) != 5 || got.Spec.Volumes[0].Name != "work" {
		t.Errorf("volumes %d, want the pod's own plus 4", len(got.Spec.Volumes))
	}
	for _, v := range got.Spec.Volumes {
		if v.Name == volumePolicy && v.ConfigMap.Name != "fallback" {
			t.Errorf("policy ConfigMap %q, want the webhook default", v.ConfigMap.Name)
		}
	}
	if d := got.Spec.DNSConfig; !slices.Equal(d.Nameservers, []string{"127.0.0.1"}) || !slices.Equal(d.Searches, []string{"corp.test"}) {
		t.Errorf("DNS %+v, want nameserver 127.0.0.1 and the pod's own searches", d)
	}
	if got.Annotations["team/owner"] != "a~b" || got.Annotations[AnnotationInjected] != "true" {
		t.Errorf("annotations %v", got.Annotations)
	}
}

func TestNotInjected(t *testing.T) {
	h := newTestHandler(t, testOptions())
	for _, tc := range []struct {
		name, namespace string
		edit            func(*corev1.Pod)
	}{
		{"unlabelled", "team-a", func(p *corev1.Pod) { p.Labels = nil }},
		{"label false", "team-a", func(p *corev1.Pod) { p.Labels[LabelInject] = "false" }},
		{"webhook namespace", "airlock-system", func(*corev1.Pod) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			tc.edit(pod)
			resp := admit(t, h, pod, tc.namespace)
			if !resp.Allowed || len(resp.Patch) != 0 || resp.PatchType != nil {
				t.Errorf("allowed %v patch %s type %v; want allowed, untouched", resp.Allowed, resp.Patch, resp.PatchType)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	h := newTestHandler(t, testOptions())
	yes := true
	for _, tc := range []struct {
		name, want string
		edit       func(*corev1.Pod)
	}{
		{"no policy annotation", "annotation airlock.dev/policy is missing", func(p *corev1.Pod) { p.Annotations = nil }},
		{"bad policy name", "is not a ConfigMap name", func(p *corev1.Pod) { p.Annotations[AnnotationPolicy] = "Bad_Name" }},
		{"policy key escapes", "is not a ConfigMap key", func(p *corev1.Pod) { p.Annotations[AnnotationPolicyKey] = "../../etc/passwd" }},
		{"laxer environment", "laxer than the webhook's environment", func(p *corev1.Pod) { p.Annotations[AnnotationEnvironment] = "development" }},
		{"unknown environment", "use production, staging or development", func(p *corev1.Pod) { p.Annotations[AnnotationEnvironment] = "prod" }},
		{"host network", "hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }},
		{"shared process namespace", "shareProcessNamespace", func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = &yes }},
		{"host PID", "hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }},
		{"privileged app", "is privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
		}},
		{"NET_ADMIN", "adds capability NET_ADMIN", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}
		}},
		{"NET_RAW", "adds capability NET_RAW", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}}
		}},
		{"mounts sidecar state", "only the airlock sidecar may mount", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: volumeState, MountPath: "/steal"}}
		}},
		{"reserved volume", "reserved for the airlock sidecar", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: volumeCA, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}},
		{"fake sidecar", "is not the sidecar this webhook injects", func(p *corev1.Pod) {
			p.Annotations[AnnotationInjected] = "true"
			p.Spec.InitContainers = []corev1.Container{{Name: SidecarName, Image: "busybox", Command: []string{"sleep", "infinity"}}}
		}},
		{"app named like the sidecar", "reserved for the airlock sidecar", func(p *corev1.Pod) { p.Spec.Containers[0].Name = SidecarName }},
		{"name too long", "shorten the pod name", func(p *corev1.Pod) { p.Name = strings.Repeat("a", 60) }},
		{"generateName too long", "shorten the pod name", func(p *corev1.Pod) { p.Name, p.GenerateName = "", strings.Repeat("b", 55)+"-" }},
		{"identities: not a pair", "want CONTAINER=IDENTITY", func(p *corev1.Pod) { p.Annotations[AnnotationIdentities] = "agent" }},
		{"identities: bad identity name", `identity name "Author!"`, func(p *corev1.Pod) { p.Annotations[AnnotationIdentities] = "agent=Author!" }},
		{"identities: container twice", `container "agent" is mapped twice`, func(p *corev1.Pod) { p.Annotations[AnnotationIdentities] = "agent=a,agent=b" }},
		{"identities: unknown container", `maps container "ghost", which the pod does not have (its containers: agent)`, func(p *corev1.Pod) {
			p.Annotations[AnnotationIdentities] = "ghost=reviewer"
		}},
		{"identities: the sidecar", `maps container "airlock", the airlock sidecar`, func(p *corev1.Pod) { p.Annotations[AnnotationIdentities] = "airlock=reviewer" }},
		{"identities: empty", "is empty", func(p *corev1.Pod) { p.Annotations[AnnotationIdentities] = " " }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			tc.edit(pod)
			resp := admit(t, h, pod, "team-a")
			if resp.Allowed || len(resp.Patch) != 0 {
				t.Fatalf("allowed %v with patch %s, want refused", resp.Allowed, resp.Patch)
			}
			if resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("result %+v, want 403 with a message containing %q", resp.Result, tc.want)
			}
		})
	}
}

func TestForgedAnnotationDoesNotSkipInjection(t *testing.T) {
	h := newTestHandler(t, testOptions())
	pod := basePod()
	pod.Annotations[AnnotationInjected] = "true"
	got := applyPatch(t, pod, admit(t, h, pod, "team-a"))
	if len(got.Spec.InitContainers) != 1 || got.Spec.InitContainers[0].Name != SidecarName {
		t.Errorf("a pod annotated as injected without the sidecar got %d init containers, want the sidecar", len(got.Spec.InitContainers))
	}
}

func TestPointerEscapes(t *testing.T) {
	for _, tc := range []struct {
		tokens []string
		want   string
	}{
		{[]string{"metadata", "annotations", "airlock.dev/injected"}, "/metadata/annotations/airlock.dev~1injected"},
		{[]string{"a~b", "c/d~/e"}, "/a~0b/c~1d~0~1e"},
		{[]string{"spec", "containers", "0", "env"}, "/spec/containers/0/env"},
	} {
		if got := pointer(tc.tokens...); got != tc.want {
			t.Errorf("pointer(%q) = %q, want %q", tc.tokens, got, tc.want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		ok   bool
	}{
		{"ok", testOptions(), true},
		{"no image", Options{UpstreamDNS: "10.96.0.10:53"}, false},
		{"no upstream DNS", Options{Image: "a"}, false},
		{"bad upstream DNS", Options{Image: "a", UpstreamDNS: "kube-dns"}, false},
		{"bare IP upstream", Options{Image: "a", UpstreamDNS: "10.96.0.10"}, true},
		{"IPv6 upstream", Options{Image: "a", UpstreamDNS: "[2001:db8::53]:53"}, true},
		{"upstream port 0", Options{Image: "a", UpstreamDNS: "10.96.0.10:0"}, false},
		{"upstream with a zone", Options{Image: "a", UpstreamDNS: "[fe80::1%eth0]:53"}, false},
		{"upstream name", Options{Image: "a", UpstreamDNS: "kube-dns.kube-system:53"}, false},
		{"bad environment", Options{Image: "a", UpstreamDNS: "10.96.0.10:53", Environment: "prod"}, false},
		{"bad default policy", Options{Image: "a", UpstreamDNS: "10.96.0.10:53", DefaultPolicyConfigMap: "A B"}, false},
		{"bad port", Options{Image: "a", UpstreamDNS: "10.96.0.10:53", AdminPort: 70000}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("Validate: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestDropsNetRaw checks that every app container ends up without CAP_NET_RAW whatever its
// security context held (none, no capabilities, other drops, ALL), that nothing else in it
// changes, and that the sidecar then runs with --packet-guard best-effort.
func TestDropsNetRaw(t *testing.T) {
	h := newTestHandler(t, testOptions())
	pod := basePod()
	user := int64(1000)
	pod.Spec.Containers = append(pod.Spec.Containers,
		corev1.Container{Name: "no-caps", Image: "i", SecurityContext: &corev1.SecurityContext{RunAsUser: &user}},
		corev1.Container{Name: "drops-some", Image: "i", SecurityContext: &corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"CHOWN"}}}},
		corev1.Container{Name: "drops-all", Image: "i", SecurityContext: &corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}},
	)
	got := applyPatch(t, pod, admit(t, h, pod, "team-a"))
	for _, c := range got.Spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil ||
			!(slices.Contains(sc.Capabilities.Drop, "NET_RAW") || slices.Contains(sc.Capabilities.Drop, "ALL")) {
			t.Errorf("container %s: securityContext %+v does not drop NET_RAW", c.Name, sc)
		}
	}
	byName := map[string]corev1.Container{}
	for _, c := range got.Spec.Containers {
		byName[c.Name] = c
	}
	if sc := byName["no-caps"].SecurityContext; sc.RunAsUser == nil || *sc.RunAsUser != 1000 {
		t.Errorf("no-caps lost its runAsUser: %+v", sc)
	}
	if d := byName["drops-some"].SecurityContext.Capabilities.Drop; !slices.Equal(d, []corev1.Capability{"CHOWN", "NET_RAW"}) {
		t.Errorf("drops-some drops %v, want [CHOWN NET_RAW]", d)
	}
	if d := byName["drops-all"].SecurityContext.Capabilities.Drop; !slices.Equal(d, []corev1.Capability{"ALL"}) {
		t.Errorf("drops-all drops %v, want [ALL] untouched", d)
	}
	if v, ok := argValue(got.Spec.InitContainers[0].Args, "--packet-guard"); !ok || v != "best-effort" {
		t.Errorf("sidecar --packet-guard = %q, %v; want best-effort (app containers have no NET_RAW)", v, ok)
	}
}

// checkRestricted checks a securityContext against Pod Security "restricted" and the
// sidecar's own bar (read-only root filesystem).
func checkRestricted(t *testing.T, sc *corev1.SecurityContext) {
	t.Helper()
	switch {
	case sc == nil:
		t.Fatal("sidecar has no securityContext")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("sidecar is privileged")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("sidecar lacks runAsNonRoot")
	case sc.RunAsUser != nil && *sc.RunAsUser == 0:
		t.Error("sidecar runs as uid 0")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("sidecar allows privilege escalation")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("sidecar root filesystem is writable")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0:
		t.Errorf("sidecar capabilities %+v, want drop ALL and nothing added", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("sidecar seccomp %+v, want RuntimeDefault", sc.SeccompProfile)
	}
}

func TestSysctlOps(t *testing.T) {
	want := corev1.Sysctl{Name: UnprivilegedPortSysctl, Value: "53"}
	cases := []struct {
		name string
		sc   *corev1.PodSecurityContext
		ops  int
	}{
		{"no securityContext", nil, 1},
		{"no sysctls", &corev1.PodSecurityContext{}, 1},
		{"other sysctls", &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ping_group_range", Value: "0 0"}}}, 1},
		{"already 0", &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: UnprivilegedPortSysctl, Value: "0"}}}, 0},
		{"higher", &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: UnprivilegedPortSysctl, Value: "1024"}}}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: tc.sc}}
			ops := sysctlOps(pod)
			if len(ops) != tc.ops {
				t.Fatalf("got %d ops %+v, want %d", len(ops), ops, tc.ops)
			}
			b, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) == 0 {
				b = []byte("[]")
			}
			pt := admissionv1.PatchTypeJSONPatch
			got := applyPatch(t, pod, &admissionv1.AdmissionResponse{Allowed: true, PatchType: &pt, Patch: b})
			v := ""
			for _, s := range got.Spec.SecurityContext.Sysctls {
				if s.Name == want.Name {
					v = s.Value
				}
			}
			if n, err := strconv.Atoi(v); err != nil || n > 53 {
				t.Errorf("after the patch %s=%q, want at most 53", want.Name, v)
			}
		})
	}
}

// TestIdentitiesAnnotation: the annotation becomes the sidecar's --identity-containers, in
// canonical form; init containers may be mapped too.
func TestIdentitiesAnnotation(t *testing.T) {
	h := newTestHandler(t, testOptions())
	pod := basePod()
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "reviewer", Image: "python:3.13"})
	pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
	pod.Annotations[AnnotationIdentities] = " reviewer = reviewer , agent=author,setup=author"
	resp := admit(t, h, pod, "team-a")
	if !resp.Allowed {
		t.Fatalf("refused: %+v", resp.Result)
	}
	got := applyPatch(t, pod, resp)
	args := got.Spec.InitContainers[0].Args
	i := slices.Index(args, "--identity-containers")
	if i < 0 || i+1 >= len(args) || args[i+1] != "agent=author,reviewer=reviewer,setup=author" {
		t.Errorf("sidecar args %q, want --identity-containers agent=author,reviewer=reviewer,setup=author", args)
	}
	// Without the annotation the sidecar gets no such flag.
	plain := admit(t, h, basePod(), "team-a")
	if args := applyPatch(t, basePod(), plain).Spec.InitContainers[0].Args; slices.Contains(args, "--identity-containers") {
		t.Errorf("sidecar args %q of a pod without identities name --identity-containers", args)
	}
}
