package kubecluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestClusterRunsAPodAndLeavesNothing(t *testing.T) {
	bins := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, bins, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster Ready in %s", time.Since(start).Round(time.Second))
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	pod := `apiVersion: v1
kind: Pod
metadata: {name: probe, namespace: default}
spec:
  automountServiceAccountToken: false
  containers:
  - name: app
    image: ` + ProbeImage + `
    imagePullPolicy: Never
`
	if out, err := c.Apply(ctx, pod); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := c.WaitPod(ctx, "default", "probe"); err != nil {
		t.Fatal(err)
	}
	out, err := c.Kubectl(ctx, "exec", "probe", "--", "/probe", "dial", NodeIP+":6443")
	if err != nil || !strings.Contains(out, "dial=ok") {
		t.Fatalf("pod cannot reach the node: %v %s", err, out)
	}
	// The kubernetes Service (kube-proxy, nftables) reaches the API server.
	out, err = c.Kubectl(ctx, "exec", "probe", "--", "/probe", "dial", "198.19.108.1:443")
	if err != nil || !strings.Contains(out, "dial=ok") {
		t.Errorf("pod cannot reach the kubernetes Service: %v %s\n%s", err, out, c.Log("kube-proxy", 2000))
	}
	root := c.CgroupRoot
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
	stopped = true
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, root)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind (%v)", filepath.Join(h, root), err)
		}
	}
}
