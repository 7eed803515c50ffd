package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// planContainer fills in st's container, network mode and limits from o: the runtime and its
// private root under the state directory, the bundle, the cgroup relative to the hierarchy
// roots (the runtime puts the container there in every hierarchy: the v2 cgroup that carries
// the kernel programs, and on a hybrid host the v1 memory, pids and cpu ones that carry the
// limits), the working directory, the mounts and the defaults.
func (m *Manager) planContainer(c *creation, cgroup2Root string) error {
	o, st := c.o, c.st
	rt, err := resolveRuntime(o.Runtime)
	if err != nil {
		return err
	}
	switch o.Network {
	case NetworkSidecar, NetworkNone:
		st.Network = o.Network
	default:
		return fmt.Errorf("--network %q: use none, or leave it out for the sidecar's network", o.Network)
	}
	rel, ok := strings.CutPrefix(st.Cgroup, strings.TrimSuffix(cgroup2Root, "/")+"/")
	if !ok {
		return fmt.Errorf("cgroup %s is not under the cgroup v2 root %s", st.Cgroup, cgroup2Root)
	}
	workdir := o.Workdir
	if workdir == "" {
		workdir = DefaultWorkdir
	}
	if workdir, err = checkInsidePath(workdir); err != nil {
		return fmt.Errorf("--workdir %w", err)
	}
	if err := checkMounts(o.Mounts); err != nil {
		return err
	}
	if o.Image != "" && m.Images == nil {
		return fmt.Errorf("--image %s: no image cache is set up", o.Image)
	}
	st.Container = &ContainerState{
		Runtime: rt, Root: runtimeRootDir(m.Store.Dir, rt), ID: st.Name,
		Bundle: bundleDirName(m.Store.Dir, st.Name), CgroupsPath: "/" + rel, Workdir: workdir,
		TmpSize: o.TmpSize, Mounts: o.Mounts, Once: o.Once,
	}
	if st.Container.Disk, err = planDisk(o.Disk, st); err != nil {
		return err
	}
	if err := planRunsc(st.Container, st.Limits.Pids); err != nil {
		return err
	}
	if o.Image != "" && st.Container.Rootless {
		// runsc maps root alone: the image's other owners would be nobody's, and its gofer
		// serving an idmapped overlay is untested.
		return fmt.Errorf("--image with --runtime %s: not supported yet (use runc or crun)", filepath.Base(rt))
	}
	if filepath.Base(rt) == "crun" && m.ops().HybridCgroups() {
		st.Container.SelfCgroups, st.Container.Global = true, []string{"--cgroup-manager=disabled"}
	}
	if st.Container.TmpSize == 0 {
		st.Container.TmpSize = DefaultTmpSize
	}
	if st.Limits.Memory == 0 {
		st.Limits.Memory = DefaultMemory
	}
	if st.Limits.Pids == 0 {
		st.Limits.Pids = DefaultPids
	}
	c.idBase = o.IDBase
	if c.idBase == 0 {
		c.idBase = DefaultIDBase
	}
	return nil
}

// checkMounts refuses two mounts at one destination.
func checkMounts(ms []Mount) error {
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.Dest] {
			return fmt.Errorf("--mount: two mounts at %s", m.Dest)
		}
		seen[m.Dest] = true
	}
	return nil
}

// doContainer claims the sandbox's uid range, writes its bundle and has the runtime create
// and start the container in the sandbox's network namespace and cgroup. It runs last, once
// the kernel programs are attached to the cgroup, so no process of the sandbox ever runs
// without them.
func (m *Manager) doContainer(ctx context.Context, c *creation) (string, error) {
	st, ct := c.st, c.st.Container
	if err := m.claimAndBundle(ctx, c); err != nil {
		return "", err
	}
	if ct.Once {
		return fmt.Sprintf("%s bundle ready (the command starts the container), %s", filepath.Base(ct.Runtime), idsAndLimits(st)), nil
	}
	if err := m.ops().RunContainer(st, st.runtimeLog()); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s, %s", filepath.Base(ct.Runtime), idsAndLimits(st)), nil
}

// doContainerEarly is doContainer for a container made with its one command (OnceProcess):
// the bundle's process is the command, and the runtime creates the container in the
// background (the "created" step waits for it); its process waits for StartOnce.
func (m *Manager) doContainerEarly(ctx context.Context, c *creation) (string, error) {
	st, ct, op := c.st, c.st.Container, c.o.OnceProcess
	if op.Exec.UID >= IDRangeSize || op.Exec.GID >= IDRangeSize || (len(op.Argv) == 0 && c.o.Image == "") {
		return "", fmt.Errorf("no command, or --user %d:%d outside 0-%d", op.Exec.UID, op.Exec.GID, IDRangeSize-1)
	}
	ct.Waiting = true
	if err := m.claimAndBundle(ctx, c); err != nil {
		return "", err
	}
	if ct.Image != nil {
		if op.Argv = ct.Image.Argv(op.Argv); len(op.Argv) == 0 {
			return "", fmt.Errorf("no command, and the image %s has neither Entrypoint nor Cmd", ct.Image.Ref)
		}
	}
	c.created = m.ops().CreateContainer(st, op, st.runtimeLog())
	return fmt.Sprintf("%s creating it with the command, beside the sidecar, %s", filepath.Base(ct.Runtime), idsAndLimits(st)), nil
}

// claimAndBundle gets the image (if any), claims the sandbox's uid range, records both and
// writes the bundle.
func (m *Manager) claimAndBundle(ctx context.Context, c *creation) error {
	st, ct := c.st, c.st.Container
	if err := m.getImage(ctx, c); err != nil {
		return err
	}
	base, claim, err := m.ops().ClaimIDRange(c.idBase, m.Store.path(st.Name))
	if err != nil {
		return err
	}
	ct.IDBase, ct.IDClaim = base, claim
	if err := m.Store.Save(st); err != nil { // the claim, for delete and reap
		return errors.Join(err, m.ops().ReleaseIDRange(claim))
	}
	return m.ops().WriteBundle(st)
}

// idsAndLimits is the uid range and limits part of the container step's line.
func idsAndLimits(st *State) string {
	base := st.Container.IDBase
	var s string
	if st.Container.Rootless {
		s = fmt.Sprintf("rootless, uid/gid 0 -> %d (the range's first; only root is mapped), %s", base, st.Limits.describe(st.Container))
	} else {
		s = fmt.Sprintf("uid/gid 0-%d -> %d-%d, %s", IDRangeSize-1, base, uint64(base)+IDRangeSize-1, st.Limits.describe(st.Container))
	}
	if img := st.Container.Image; img != nil {
		s += fmt.Sprintf(", image %s (%s: %d layers, %d unpacked now)", img.Ref, img.Digest, len(img.Layers), img.Unpacked)
	}
	return s
}

// OnceProcess is the one command of a container created with it (CreateOptions.OnceProcess).
type OnceProcess struct {
	// Argv is the command; Exec its user, environment and env-file choice, as for exec.
	Argv []string
	Exec ExecOptions
	// Stdio are the command's standard input, output and error.
	Stdio [3]*os.File
}

// StartOnce starts the command of sandbox name, created with CreateOptions.OnceProcess, and
// returns its process id: a child of this process (WaitContainer waits for it; signals go to
// it by pid).
func (m *Manager) StartOnce(name string) (int, error) {
	st, err := m.Store.Load(name)
	if err != nil {
		return 0, err
	}
	if st.Phase != PhaseReady || st.Container == nil || !st.Container.Waiting {
		return 0, fmt.Errorf("sandbox %s has no created command waiting to start", name)
	}
	return m.ops().StartContainer(st)
}

// undoContainer deletes the container (the runtime kills its processes and removes its
// cgroups), its bundle and its uid range claim.
func (m *Manager) undoContainer(_ context.Context, st *State) (string, error) {
	if st.Container == nil {
		return "", nil
	}
	ct := st.Container
	err := errors.Join(m.ops().DeleteContainer(st), m.ops().ReleaseIDRange(ct.IDClaim))
	if ct.Image != nil && m.Images != nil && err == nil { // its layers are no longer in use
		err = m.Images.Release(m.Store.path(st.Name))
	}
	return "removed   container " + ct.ID + ", bundle " + ct.Bundle, err
}

// describe is the limits line create prints.
func (l Limits) describe(ct *ContainerState) string {
	cpu := "cpu unlimited"
	if l.CPU > 0 {
		cpu = fmt.Sprintf("cpu %g", l.CPU)
	}
	tmp := fmt.Sprintf("/tmp and %s %s each", ct.Workdir, formatBytes(ct.TmpSize))
	if ct.Disk != nil {
		tmp = ct.Disk.describe(ct)
	}
	return fmt.Sprintf("memory %s, pids %d, %s, %s", formatBytes(l.Memory), l.Pids, cpu, tmp)
}

// formatBytes writes n in the largest binary unit that divides it.
func formatBytes(n int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.s)
		}
	}
	return fmt.Sprint(n)
}

// getImage gets the image of the sandbox (CreateOptions.Image) ready and pinned for it, and
// takes its working directory when create was given none.
func (m *Manager) getImage(ctx context.Context, c *creation) error {
	if c.o.Image == "" {
		return nil
	}
	st, ct := c.st, c.st.Container
	img, err := m.Images.Get(ctx, c.o.Image, m.Store.path(st.Name))
	if err != nil {
		return err
	}
	ct.Image = img
	if wd := img.Config.WorkingDir; c.o.Workdir == "" && wd != "" {
		if !path.IsAbs(wd) {
			return fmt.Errorf("image %s: WorkingDir %q is not an absolute path", img.Ref, wd)
		}
		ct.Workdir, ct.WorkdirInImage = path.Clean(wd), true
	}
	return m.Store.Save(st) // the image, for delete and reap
}
