package sandbox

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// The kernel stages of Doctor run against the fake kernel: no root, no BPF.
func TestDoctorStages(t *testing.T) {
	m, h, _ := newTestManager(t)
	var names []string
	for _, s := range m.doctorStages() {
		names = append(names, s.name)
	}
	want := []string{"privileges", "cgroup v2", "cgroup layout", "oci runtime", "user namespaces", "overlayfs", "disk", "bpffs", "kernel BPF features", "packet socket guard",
		"network namespaces", "subnet", "ports", "state directory", "vault"}
	if !slices.Equal(names, want) {
		t.Errorf("doctor stages %v, want %v", names, want)
	}
	ctx, o := context.Background(), DoctorOptions{}
	for _, tc := range []struct {
		name   string
		setup  func()
		run    func(context.Context, DoctorOptions) Check
		result string
	}{
		{"BPF features", func() {}, m.checkBPFFeatures, Pass},
		{"BPF features missing", func() { h.probeErr = errors.New("no cgroup/connect4") }, m.checkBPFFeatures, Fail},
		{"packet guard without the BPF LSM", func() {}, m.checkPacketGuard, Warn},
		{"bpffs not mounted", func() {}, m.checkBPFFS, Warn},
		{"vault not configured", func() {}, m.checkVault, Skip},
		{"state directory", func() {}, m.checkStateDir, Pass},
		{"runtime missing", func() { o.Runtime = "/nonexistent/runc" }, m.checkRuntime, Fail},
		{"runtime answers its version", func() { o.Runtime = "/bin/true" }, m.checkRuntime, Pass},
		{"no kernel", func() { m.Kernel = nil }, m.checkBPFFeatures, Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			c := tc.run(ctx, o)
			if c.Result != tc.result || (c.Result == Fail && c.Fix == "") {
				t.Errorf("got %+v, want %s (with a fix when it fails)", c, tc.result)
			}
		})
	}
}
