package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/kubecluster"
)

// EnvClusterBench turns TestKubeBench on (make bench-kube).
const EnvClusterBench = "AIRLOCK_CLUSTER_BENCH"

// TestKubeBench reports, on the real cluster with the webhook and the node agent installed:
// the time from applying a pod to its Ready condition, with and without injection, and the
// injected sidecar's RSS at idle and with 1 000 open tunnels. It measures; it asserts only
// that the measurements were taken.
func TestKubeBench(t *testing.T) {
	if os.Getenv(EnvClusterBench) != "1" {
		t.Skipf("cluster benchmark: set %s=1 (make bench-kube)", EnvClusterBench)
	}
	bins := kubecluster.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := startEnv(ctx, t, bins)
	e.install(ctx, t)
	e.kubectl(ctx, t, "-n", "airlock-node", "rollout", "status", "daemonset/airlock-node", "--timeout=3m")
	const ns = "na-bench"
	e.apply(ctx, t, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n  labels: {pod-security.kubernetes.io/enforce: restricted}\n")
	e.apply(ctx, t, strings.Replace(policyConfigMap(allowedHost), "namespace: "+testNS, "namespace: "+ns, 1))
	// The webhook is installed with Vault login: injected pods mount this ConfigMap.
	e.apply(ctx, t, vaultCAConfigMapFor(ns, e.vault.caPEM))
	var report []string
	for i := range 3 {
		for _, labelled := range []bool{false, true} {
			name := fmt.Sprintf("na-bench-%v-%d", labelled, i)
			start := time.Now()
			e.apply(ctx, t, restrictedPod(ns, name, labelled))
			if err := e.c.WaitPod(ctx, ns, name); err != nil {
				t.Fatal(err)
			}
			report = append(report, fmt.Sprintf("apply->Ready injected=%v run %d: %s", labelled, i, time.Since(start).Round(100*time.Millisecond)))
		}
	}
	pod := "na-bench-true-0"
	idle := e.sidecarRSS(t, ns, pod)
	report = append(report, "sidecar RSS idle: "+idle)
	report = append(report, e.rssWithTunnels(ctx, t, ns, pod, 1000)...)
	t.Log("kube bench (apply->Ready is observed by polling the API, about 1 s resolution):\n  " + strings.Join(report, "\n  "))
}

// sidecarRSS reads VmRSS of the pod's sidecar process, and how much of it is anonymous memory
// (heap, stacks) and how much the binary's own pages (file).
func (e *env) sidecarRSS(t *testing.T, ns, name string) string {
	t.Helper()
	p := e.fullPod(context.Background(), t, ns, name)
	var parts []string
	for _, pid := range e.sidecarPIDs(t, p) {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			t.Fatal(err)
		}
		f := map[string]string{}
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				f[k] = strings.TrimSpace(v)
			}
		}
		parts = append(parts, fmt.Sprintf("%s (anon %s, file %s)", f["VmRSS"], f["RssAnon"], f["RssFile"]))
	}
	return strings.Join(parts, " + ")
}

// rssWithTunnels opens n CONNECT tunnels from the app container through the sidecar and
// reads the sidecar's RSS while they are open.
func (e *env) rssWithTunnels(ctx context.Context, t *testing.T, ns, pod string, n int) []string {
	cmd := e.c.Command(ctx, e.c.Bins.Path("kubectl"), "-n", ns, "exec", pod, "-c", "app", "--", "/probe", "tunnels", strconv.Itoa(n), allowedHost+":80")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "tunnels=") {
		t.Fatalf("tunnels: %q %v", line, err)
	}
	return []string{"tunnels opened: " + strings.TrimSpace(line), fmt.Sprintf("sidecar RSS with %d tunnels: %s", n, e.sidecarRSS(t, ns, pod))}
}
