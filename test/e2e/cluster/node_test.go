package cluster

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/node"
	"github.com/airlock-dev/airlock/test/kubecluster"
)

// The node agent's tests use names of their own (prefix na-): pins live in a bpffs that
// other test clusters' names must never meet.
const (
	naNS  = "na-restricted"
	naPod = "na-agent"
)

// TestNodeAgentOnARealCluster installs airlock as a platform team would (the webhook and the
// node agent DaemonSet) and checks the unprivileged sidecar in a namespace that enforces Pod
// Security "restricted": admitted, Ready, enforced by the node agent, and closed whatever
// dies.
func TestNodeAgentOnARealCluster(t *testing.T) {
	t.Parallel() // beside the other clusters (allowClusterTestsInParallel)
	bins := kubecluster.Require(t)
	if !kernelEnforced {
		t.Fatal("kernelEnforced is false: the webhook would inject development sidecars")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := startEnv(ctx, t, bins)
	t.Run("install", func(t *testing.T) { e.install(ctx, t) })
	if t.Failed() {
		return
	}
	e.kubectl(ctx, t, "-n", "airlock-node", "rollout", "status", "daemonset/airlock-node", "--timeout=3m")
	e.apply(ctx, t, `apiVersion: v1
kind: Namespace
metadata:
  name: `+naNS+`
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/warn: restricted
---
`+vaultCAConfigMapFor(naNS, e.vault.caPEM))
	e.apply(ctx, t, strings.Replace(policyConfigMap(allowedHost), "namespace: "+testNS, "namespace: "+naNS, 1))
	start := time.Now()
	e.apply(ctx, t, restrictedPod(naNS, naPod, true))
	if err := e.c.WaitPod(ctx, naNS, naPod); err != nil {
		e.dumpLogs(ctx, t, naNS, naPod)
		t.Fatal(err)
	}
	t.Logf("restricted injected pod Ready %s after apply", time.Since(start).Round(time.Second))
	t.Run("specs have no privilege", func(t *testing.T) { e.checkUnprivilegedSpecs(ctx, t) })
	t.Run("enforced", func(t *testing.T) { e.checkNodeEnforced(ctx, t) })
	t.Run("app cannot talk to the agent", func(t *testing.T) { e.checkAgentRefusesApp(ctx, t) })
	t.Run("other pods cannot reach the endpoints", func(t *testing.T) { e.checkEndpointsPrivate(ctx, t) })
	t.Run("identities by annotation across a restart", func(t *testing.T) { e.checkIdentities(ctx, t) })
	t.Run("sidecar kill -9 keeps closed", func(t *testing.T) { e.checkSidecarKill(ctx, t) })
	t.Run("agent restart adopts", func(t *testing.T) { e.checkAgentRestart(ctx, t) })
	t.Run("delete leaves no pins", func(t *testing.T) { e.checkNodeDelete(ctx, t) })
	t.Run("no agent: the app never starts", func(t *testing.T) { e.checkNoAgent(ctx, t) })
	t.Run("sandbox create in a restricted namespace", func(t *testing.T) { e.checkSandboxCreateRestricted(ctx, t) })
}

// checkSandboxCreateRestricted: `airlock sandbox create --backend kubernetes` makes a pod
// that the restricted namespace admits, and it is enforced like any labelled pod.
func (e *env) checkSandboxCreateRestricted(ctx context.Context, t *testing.T) {
	bin := airlockCLI(ctx, t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, []byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: sandbox}\nspec:\n  mode: enforce\n  egress:\n    - name: allowed\n      hosts: [\""+allowedHost+"\"]\n      ports: [80]\n"))
	out, err := e.c.Command(ctx, bin, "sandbox", "create", "na-sbx", "--backend", "kubernetes", "--namespace", naNS,
		"--image", kubecluster.ProbeImage, "--policy", policy).CombinedOutput()
	if err != nil {
		t.Fatalf("sandbox create: %v\n%s", err, out)
	}
	if err := e.c.WaitPod(ctx, naNS, "na-sbx"); err != nil {
		t.Fatal(err)
	}
	exec := func(args ...string) string {
		r, _ := e.c.Kubectl(ctx, append([]string{"-n", naNS, "exec", "na-sbx", "-c", "sandbox", "--", "/probe"}, args...)...)
		return strings.TrimSpace(r)
	}
	if r := exec("http", "http://"+allowedHost+"/"); !strings.HasPrefix(r, "status=200") {
		t.Errorf("sandbox pod to the allowed host: %s, want status=200", r)
	}
	if r := exec("dial", deniedIP+":80"); r != "dial=EPERM" {
		t.Errorf("sandbox pod, direct connect to a denied address: %s, want dial=EPERM", r)
	}
	e.kubectl(ctx, t, "-n", naNS, "delete", "pod", "na-sbx", "--wait=true", "--timeout=2m")
}

// restrictedPod is a probe pod that Pod Security "restricted" admits.
func restrictedPod(ns, name string, labelled bool) string {
	meta := ""
	if labelled {
		meta = `
  labels: {airlock.dev/inject: "true"}
  annotations: {airlock.dev/policy: agent-policy}`
	}
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + ns + meta + `
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 5
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: app
      image: ` + kubecluster.ProbeImage + `
      imagePullPolicy: Never
      securityContext:
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}
`
}

func (e *env) dumpLogs(ctx context.Context, t *testing.T, ns, name string) {
	side, _ := e.c.Kubectl(ctx, "-n", ns, "logs", name, "-c", "airlock", "--tail=40")
	agent, _ := e.c.Kubectl(ctx, "-n", "airlock-node", "logs", "daemonset/airlock-node", "--tail=40")
	t.Logf("sidecar log:\n%s\nagent log:\n%s", side, agent)
}

// fullPod is the part of a Pod the node agent's tests read.
type fullPod struct {
	Metadata struct {
		UID string `json:"uid"`
	} `json:"metadata"`
	Spec struct {
		InitContainers  []fullContainer  `json:"initContainers"`
		Volumes         []map[string]any `json:"volumes"`
		SecurityContext struct {
			Sysctls []struct{ Name, Value string } `json:"sysctls"`
		} `json:"securityContext"`
	} `json:"spec"`
	Status struct {
		PodIP                 string `json:"podIP"`
		InitContainerStatuses []struct {
			Name         string `json:"name"`
			ContainerID  string `json:"containerID"`
			RestartCount int    `json:"restartCount"`
			Ready        bool   `json:"ready"`
		} `json:"initContainerStatuses"`
	} `json:"status"`
}

type fullContainer struct {
	Name            string           `json:"name"`
	Args            []string         `json:"args"`
	VolumeMounts    []map[string]any `json:"volumeMounts"`
	SecurityContext struct {
		Privileged               *bool `json:"privileged"`
		RunAsNonRoot             *bool `json:"runAsNonRoot"`
		RunAsUser                *int  `json:"runAsUser"`
		AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `json:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Add, Drop []string
		} `json:"capabilities"`
		SeccompProfile struct{ Type string } `json:"seccompProfile"`
	} `json:"securityContext"`
}

func (e *env) fullPod(ctx context.Context, t *testing.T, ns, name string) fullPod {
	t.Helper()
	var p fullPod
	if err := json.Unmarshal([]byte(e.kubectl(ctx, t, "-n", ns, "get", "pod", name, "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// sidecarID returns the running sidecar container's ID and restart count.
func (p fullPod) sidecarID() (string, int) {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == "airlock" {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			return id, s.RestartCount
		}
	}
	return "", 0
}

func (e *env) checkUnprivilegedSpecs(ctx context.Context, t *testing.T) {
	p := e.fullPod(ctx, t, naNS, naPod)
	if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != "airlock" {
		t.Fatalf("init containers %+v, want the airlock sidecar first", p.Spec.InitContainers)
	}
	sc := p.Spec.InitContainers[0].SecurityContext
	switch {
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("sidecar is privileged")
	case len(sc.Capabilities.Add) != 0 || strings.Join(sc.Capabilities.Drop, ",") != "ALL":
		t.Errorf("sidecar capabilities add %v drop %v, want none added and ALL dropped", sc.Capabilities.Add, sc.Capabilities.Drop)
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || (sc.RunAsUser != nil && *sc.RunAsUser == 0):
		t.Error("sidecar may run as root")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("sidecar allows privilege escalation")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("sidecar's root filesystem is writable")
	case sc.SeccompProfile.Type != "RuntimeDefault":
		t.Errorf("sidecar seccomp %q, want RuntimeDefault", sc.SeccompProfile.Type)
	}
	for _, v := range p.Spec.Volumes {
		if _, ok := v["hostPath"]; ok {
			t.Errorf("pod volume %v is a hostPath", v["name"])
		}
	}
	found := false
	for _, s := range p.Spec.SecurityContext.Sysctls {
		found = found || (s.Name == "net.ipv4.ip_unprivileged_port_start" && s.Value == "53")
	}
	if !found {
		t.Errorf("pod sysctls %+v, want net.ipv4.ip_unprivileged_port_start=53", p.Spec.SecurityContext.Sysctls)
	}
}

// checkNodeEnforced: the kernel (held by the agent) refuses a direct connect until a DNS
// answer through the sidecar opens the address, and everything part 1 checks still holds.
func (e *env) checkNodeEnforced(ctx context.Context, t *testing.T) {
	if out := e.probe(ctx, t, naNS, naPod, "dial", allowedIP+":80"); out != "dial=EPERM" {
		t.Errorf("direct connect before any DNS answer: %s, want dial=EPERM", out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "dns", allowedHost); !strings.HasPrefix(out, "rcode=Success") {
		t.Errorf("DNS query for the allowed name: %s, want rcode=Success", out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "dial", allowedIP+":80"); out != "dial=ok" {
		t.Errorf("direct connect after the DNS answer (allowed through the node agent): %s, want dial=ok", out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "http", "http://"+allowedHost+"/hello"); !strings.HasPrefix(out, "status=200") {
		t.Errorf("allowed host: %s, want status=200", out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "http", "http://"+deniedHost+"/"); !strings.HasPrefix(out, "status=403") {
		t.Errorf("denied host: %s, want status=403", out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "dial", deniedIP+":80"); out != "dial=EPERM" {
		t.Errorf("direct connect to a denied address: %s, want dial=EPERM", out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "dns", deniedHost); !strings.HasPrefix(out, "rcode=Refused") {
		t.Errorf("DNS query for a denied name: %s, want rcode=Refused", out)
	}
}

func (e *env) checkAgentRefusesApp(ctx context.Context, t *testing.T) {
	if out := e.probe(ctx, t, naNS, naPod, "agent", node.SocketName); !strings.HasPrefix(out, "agent=refused") || !strings.Contains(out, "not the pod's sidecar") {
		t.Errorf("app container talking to the node agent: %s, want agent=refused (not the pod's sidecar)", out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "dial", deniedIP+":80"); out != "dial=EPERM" {
		t.Errorf("after the app's hello, direct connect to the denied address: %s, want dial=EPERM", out)
	}
}

// checkEndpointsPrivate dials the sidecar's ports at the pod's IP from another pod.
func (e *env) checkEndpointsPrivate(ctx context.Context, t *testing.T) {
	e.apply(ctx, t, restrictedPod(naNS, "na-other", false))
	if err := e.c.WaitPod(ctx, naNS, "na-other"); err != nil {
		t.Fatal(err)
	}
	ip := e.fullPod(ctx, t, naNS, naPod).Status.PodIP
	for _, port := range []string{"9090", "4000", "3128", "53"} {
		if out := e.probe(ctx, t, naNS, "na-other", "dial", ip+":"+port); out != "dial=ECONNREFUSED" {
			t.Errorf("another pod to the sidecar's port %s: %s, want dial=ECONNREFUSED (loopback only)", port, out)
		}
	}
}

// sidecarPIDs finds the sidecar container's processes on the node.
func (e *env) sidecarPIDs(t *testing.T, p fullPod) []int {
	t.Helper()
	id, _ := p.sidecarID()
	return e.containerPIDs(t, p.Metadata.UID, id)
}

// containerPIDs finds the processes of a pod's container on the node, by its cgroup.
func (e *env) containerPIDs(t *testing.T, uid, containerID string) []int {
	t.Helper()
	root, err := node.V2Root("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cg, err := node.FindCgroups(filepath.Join(root, e.c.CgroupRoot), uid, containerID)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(cg.Sidecar, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no process in the container's cgroup %s", cg.Sidecar)
	}
	return pids
}

// waitFor polls cond (an observation of the cluster) until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(time.Second)
	}
}

func (e *env) checkSidecarKill(ctx context.Context, t *testing.T) {
	p := e.fullPod(ctx, t, naNS, naPod)
	_, restarts := p.sidecarID()
	for _, pid := range e.sidecarPIDs(t, p) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	if out := e.probe(ctx, t, naNS, naPod, "dial", deniedIP+":80"); out != "dial=EPERM" {
		t.Errorf("sidecar killed: direct connect to a denied address: %s, want dial=EPERM", out)
	}
	waitFor(t, "the sidecar restarted and Ready", 3*time.Minute, func() bool {
		q := e.fullPod(ctx, t, naNS, naPod)
		_, n := q.sidecarID()
		return n > restarts && q.Status.InitContainerStatuses[0].Ready
	})
	if out := e.probe(ctx, t, naNS, naPod, "http", "http://"+allowedHost+"/again"); !strings.HasPrefix(out, "status=200") {
		t.Errorf("after the sidecar restart, allowed host: %s, want status=200", out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "dial", deniedIP+":80"); out != "dial=EPERM" {
		t.Errorf("after the sidecar restart, direct connect to a denied address: %s, want dial=EPERM", out)
	}
}

// checkAgentRestart kills the agent (-9: the kubelet restarts its container), then deletes
// its pod (the DaemonSet makes another): each time the pod stays closed meanwhile, and the
// new agent adopts the pod's pins.
func (e *env) checkAgentRestart(ctx context.Context, t *testing.T) {
	const sel = "app.kubernetes.io/name=airlock-node"
	info := strings.Fields(e.kubectl(ctx, t, "-n", "airlock-node", "get", "pod", "-l", sel, "-o",
		"jsonpath={.items[0].metadata.uid} {.items[0].status.containerStatuses[0].containerID} {.items[0].status.containerStatuses[0].restartCount}"))
	if len(info) != 3 {
		t.Fatalf("agent pod: %v", info)
	}
	_, id, _ := strings.Cut(info[1], "://")
	for _, pid := range e.containerPIDs(t, info[0], id) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	if out := e.probe(ctx, t, naNS, naPod, "dial", deniedIP+":80"); out != "dial=EPERM" {
		t.Errorf("agent killed: direct connect to a denied address: %s, want dial=EPERM", out)
	}
	waitFor(t, "the agent container restarted", 2*time.Minute, func() bool {
		out, _ := e.c.Kubectl(ctx, "-n", "airlock-node", "get", "pod", "-l", sel, "-o", "jsonpath={.items[0].status.containerStatuses[0].restartCount}")
		return strings.TrimSpace(out) != info[2] && strings.TrimSpace(out) != ""
	})
	e.checkAgentBack(ctx, t, "after kill -9")

	e.kubectl(ctx, t, "-n", "airlock-node", "delete", "pod", "-l", sel, "--wait=true", "--timeout=2m")
	if out := e.probe(ctx, t, naNS, naPod, "dial", deniedIP+":80"); out != "dial=EPERM" {
		t.Errorf("agent gone: direct connect to a denied address: %s, want dial=EPERM", out)
	}
	e.kubectl(ctx, t, "-n", "airlock-node", "rollout", "status", "daemonset/airlock-node", "--timeout=3m")
	e.checkAgentBack(ctx, t, "after the pod's deletion")
}

// checkAgentBack waits for the sidecar to be served by the new agent and checks it adopted
// the pod's pins.
func (e *env) checkAgentBack(ctx context.Context, t *testing.T, when string) {
	// The sidecar redials; DNS answers (which need the agent to open their addresses) come
	// back once it has.
	waitFor(t, "the sidecar back with the new agent "+when, 2*time.Minute, func() bool {
		out, _ := e.c.Kubectl(ctx, "-n", naNS, "exec", naPod, "-c", "app", "--", "/probe", "dns", allowedHost)
		return strings.HasPrefix(strings.TrimSpace(out), "rcode=Success")
	})
	if out := e.probe(ctx, t, naNS, naPod, "dial", allowedIP+":80"); out != "dial=ok" {
		t.Errorf("%s, direct connect to a resolved allowed address: %s, want dial=ok", when, out)
	}
	if out := e.probe(ctx, t, naNS, naPod, "dial", deniedIP+":80"); out != "dial=EPERM" {
		t.Errorf("%s, direct connect to a denied address: %s, want dial=EPERM", when, out)
	}
	logs := e.kubectl(ctx, t, "-n", "airlock-node", "logs", "daemonset/airlock-node")
	if !strings.Contains(logs, `"adopted":true`) {
		t.Errorf("%s, the new agent did not adopt the pod's pins:\n%s", when, logs)
	}
}

func (e *env) checkNodeDelete(ctx context.Context, t *testing.T) {
	pins := "/sys/fs/bpf/airlock/" + naNS + "~" + naPod
	if out, err := e.c.Command(ctx, "ls", pins).CombinedOutput(); err != nil {
		t.Fatalf("no pins at %s while the pod runs (%v: %s)", pins, err, out)
	}
	e.kubectl(ctx, t, "-n", naNS, "delete", "pod", naPod, "--wait=true", "--timeout=2m")
	waitFor(t, "the pod's pins removed", time.Minute, func() bool {
		return e.c.Command(ctx, "test", "-e", pins).Run() != nil
	})
}

// checkNoAgent takes the agent off the node: a new labelled pod's app container does not
// start (the sidecar's startup probe waits for the agent); once the agent is back, it does.
func (e *env) checkNoAgent(ctx context.Context, t *testing.T) {
	e.kubectl(ctx, t, "-n", "airlock-node", "patch", "daemonset", "airlock-node", "--type=merge",
		"-p", `{"spec":{"template":{"spec":{"nodeSelector":{"airlock.test/no-such-node":"x"}}}}}`)
	e.kubectl(ctx, t, "-n", "airlock-node", "wait", "--for=delete", "pod", "-l", "app.kubernetes.io/name=airlock-node", "--timeout=2m")
	const name = "na-noagent"
	e.apply(ctx, t, restrictedPod(naNS, name, true))
	// A negative over a window: for 30 s the app container must not have started.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		state := e.kubectl(ctx, t, "-n", naNS, "get", "pod", name, "-o", "jsonpath={.status.containerStatuses[0].state}")
		if strings.Contains(state, "running") || strings.Contains(state, "terminated") {
			t.Fatalf("the app container started without a node agent: %s", state)
		}
		time.Sleep(2 * time.Second)
	}
	logs, _ := e.c.Kubectl(ctx, "-n", naNS, "logs", name, "-c", "airlock")
	if !strings.Contains(logs, "waiting for the node agent") {
		t.Errorf("the sidecar's log does not say it waits for the node agent:\n%s", logs)
	}
	e.kubectl(ctx, t, "-n", "airlock-node", "patch", "daemonset", "airlock-node", "--type=json",
		"-p", `[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`)
	e.kubectl(ctx, t, "-n", "airlock-node", "rollout", "status", "daemonset/airlock-node", "--timeout=3m")
	if err := e.c.WaitPod(ctx, naNS, name); err != nil {
		t.Fatalf("with the agent back, the pod did not become Ready: %v", err)
	}
	if out := e.probe(ctx, t, naNS, name, "dial", deniedIP+":80"); out != "dial=EPERM" {
		t.Errorf("direct connect to a denied address: %s, want dial=EPERM", out)
	}
}
