package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runsc runs rootless as the sandbox's uid, on the host network of the sandbox's namespace,
// placed by airlock, its state in the bundle; its spec maps the one uid; exec refuses other
// ids; `create` is not used with it. runc and crun are left as they were.
func TestRunscPlan(t *testing.T) {
	st := testState()
	st.Container.Runtime, st.Container.Bundle = "/usr/bin/runsc", "/run/airlock/bundles/x-sb"
	st.Container.Mounts = nil
	if err := planRunsc(st.Container, 0); err != nil {
		t.Fatal(err)
	}
	c := st.Container
	if !c.Rootless || !c.SelfCgroups || c.Root != "/run/airlock/bundles/x-sb/runsc" {
		t.Errorf("plan: rootless %v self-cgroups %v root %q", c.Rootless, c.SelfCgroups, c.Root)
	}
	for _, f := range []string{"--rootless", "--network=host", "--ignore-cgroups"} {
		if !slices.Contains(c.Global, f) {
			t.Errorf("global flags %v lack %s", c.Global, f)
		}
	}
	if runAs(c) != c.IDBase || placementOf(st).runAs != c.IDBase {
		t.Errorf("runs as %d, placed as %d; want the sandbox's uid %d", runAs(c), placementOf(st).runAs, c.IDBase)
	}
	spec, err := ociSpec(st, rootView{})
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Linux.UIDMappings) != 1 || spec.Linux.UIDMappings[0].HostID != 0 || spec.Linux.UIDMappings[0].Size != 1 ||
		len(spec.Linux.GIDMappings) != 1 || spec.Linux.GIDMappings[0].Size != 1 {
		t.Errorf("runsc's id maps %+v %+v, want the one uid runsc runs as", spec.Linux.UIDMappings, spec.Linux.GIDMappings)
	}
	if err := checkExecUser(c, 0, 0); err != nil {
		t.Errorf("exec as root: %v", err)
	}
	if err := checkExecUser(c, 1000, 0); err == nil || !strings.Contains(err.Error(), "maps only the sandbox's root") {
		t.Errorf("exec --user 1000 under runsc: %v", err)
	}
	if err := planRunsc(&ContainerState{Runtime: "runsc"}, 64); err == nil || !strings.Contains(err.Error(), "at least 256") {
		t.Errorf("--pids 64 under runsc: %v, want a refusal naming the minimum", err)
	}
	if CreatesOnce("/usr/bin/runsc") || !CreatesOnce("runc") || !CreatesOnce("crun") {
		t.Error("CreatesOnce: want false for runsc only")
	}

	rc := testState()
	rc.Container.Runtime = "/usr/sbin/runc"
	if err := planRunsc(rc.Container, 64); err != nil {
		t.Fatal(err)
	}
	if rc.Container.Rootless || runAs(rc.Container) != 0 || checkExecUser(rc.Container, 1000, 1000) != nil {
		t.Errorf("runc: rootless %v, runs as %d", rc.Container.Rootless, runAs(rc.Container))
	}
}

// runsc, running as an unprivileged uid, is refused a --mount it could not reach, by name.
func TestRunscMountsReachable(t *testing.T) {
	open, closed := t.TempDir(), t.TempDir()
	for _, d := range []string{open, filepath.Dir(open)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(closed, "x")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &ContainerState{Runtime: "/usr/bin/runsc", Bundle: "/run/airlock/bundles/x-sb", Mounts: []Mount{{Source: open, Dest: "/a"}}}
	if err := planRunsc(c, 0); err != nil {
		t.Errorf("a world-reachable mount: %v", err)
	}
	c.Mounts = append(c.Mounts, Mount{Source: inner, Dest: "/b", Writable: true})
	err := planRunsc(c, 0)
	if err == nil || !strings.Contains(err.Error(), "--mount "+inner+":/b") || !strings.Contains(err.Error(), closed+" is mode 0700") {
		t.Errorf("a mount under a 0700 directory: %v, want a refusal naming it and the directory", err)
	}
	c.Runtime, c.Rootless = "/usr/sbin/runc", false
	if err := planRunsc(c, 0); err != nil {
		t.Errorf("runc opens its sources as root: %v", err)
	}
}
