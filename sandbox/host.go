package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// hostOps is every change the manager makes to this machine outside its state directory:
// network namespaces and veth pairs (netlink), cgroups (cgroupfs), the files `ip netns exec`
// reads, and processes. Create's steps, their undos, Delete and Reap go through it, so that unit
// tests run them against a recording fake without root; linuxHost is the real one.
type hostOps interface {
	networkOps
	cgroupOps
	processOps
	containerOps
}

// containerOps are the OCI container operations: the host-wide uid range claims, the bundle
// and the runtime.
type containerOps interface {
	// ClaimIDRange reserves a free uid/gid range from base on, host-wide, for owner.
	ClaimIDRange(base uint32, owner string) (start uint32, claim string, err error)
	// ReleaseIDRange removes a claim; a missing one is not an error.
	ReleaseIDRange(claim string) error
	// WriteBundle makes st's disk (--disk) and writes its bundle (rootfs and config.json);
	// with ContainerState.etcAfterCreate, not the part of /etc WriteBundleEtc writes.
	WriteBundle(st *State) error
	// WriteBundleEtc writes what WriteBundle left of the bundle's /etc (nothing unless
	// ContainerState.etcAfterCreate); it needs the sandbox's public files.
	WriteBundleEtc(st *State) error
	// RunContainer has the runtime create and start st's container, detached, the runtime
	// started in the sandbox's network namespace (and cgroups, when airlock places it).
	RunContainer(st *State, logFile string) error
	// CreateContainer makes op the process of st's bundle and has the runtime create the
	// container in the background, placed as RunContainer's, the process waiting for
	// StartContainer with op's stdio; the channel gets the outcome.
	CreateContainer(st *State, op *OnceProcess, logFile string) <-chan error
	// StartContainer starts the process of a container CreateContainer made and returns its
	// pid (as this process sees it).
	StartContainer(st *State) (int, error)
	// DeleteContainer kills and deletes the container, releases its disk and removes its
	// bundle; a missing one is not an error.
	DeleteContainer(st *State) error
	// StrayIDClaims lists claims owned by a missing state file of storeDir.
	StrayIDClaims(storeDir string) []string
	// HybridCgroups reports whether the host mounts cgroup v1 hierarchies beside v2.
	HybridCgroups() bool
}

// networkOps are the network namespace and veth operations.
type networkOps interface {
	// CurrentNetns is the inode of the calling thread's network namespace.
	CurrentNetns() (uint64, error)
	// NetnsExists reports whether /run/netns/name is a mounted namespace.
	NetnsExists(name string) bool
	// AddrsIn lists the addresses of this namespace's interfaces inside subnet.
	AddrsIn(subnet netip.Prefix) ([]netip.Addr, error)
	// CreateNetns creates and mounts /run/netns/name; it fails if the name exists.
	CreateNetns(name string) error
	// DeleteNetns unmounts and removes /run/netns/name; a missing one is not an error.
	DeleteNetns(name string) error
	// WireLink creates the veth pair of l between this namespace and netns, with raw's routes.
	WireLink(netns, hostVeth string, l link, raw []netip.Prefix) error
	// LoopbackUp brings up lo in netns (all a --network none sandbox has).
	LoopbackUp(netns string) error
	// DeleteHostVeth removes the pair from the namespace whose inode is hostNetns (the current
	// one, or the supervisor's); a missing link is not an error.
	DeleteHostVeth(hostVeth string, hostNetns uint64, supervisorPid int) error
	// ReleaseHostVeth takes the addresses off the host end of the pair (in the namespace
	// whose inode is hostNetns) and leaves the pair to go with the sandbox's namespace; a
	// missing link is not an error.
	ReleaseHostVeth(hostVeth string, hostNetns uint64, supervisorPid int) error
	// WriteNetnsResolvConf writes /etc/netns/netns/resolv.conf (for `ip netns exec`).
	WriteNetnsResolvConf(netns string, data []byte) error
	// RemoveNetnsEtc removes /etc/netns/netns; a missing one is not an error.
	RemoveNetnsEtc(netns string) error
}

// cgroupOps are the cgroup v2 operations.
type cgroupOps interface {
	// CheckCgroup2Dir fails unless path (or its nearest existing ancestor) is on cgroup v2.
	CheckCgroup2Dir(path string) error
	// CgroupExists reports whether the cgroup directory exists.
	CgroupExists(path string) bool
	// CreateCgroup makes the cgroup (failing if it exists) and writes its limits.
	CreateCgroup(path string, lim Limits) error
	// RemoveCgroup kills the cgroup's processes and removes it; a missing one is not an error.
	RemoveCgroup(ctx context.Context, path string) error
	// ChildCgroups lists the names of parent's child cgroups.
	ChildCgroups(parent string) ([]string, error)
}

// processOps start, identify and stop the sidecar and supervisor processes.
type processOps interface {
	// StartDetached starts bin with args and env in a session of its own, its output appended
	// to logFile; exited is closed when it exits while this process runs.
	StartDetached(bin string, args, env []string, logFile string) (pid int, exited <-chan struct{}, err error)
	// ProcStart is pid's start time in clock ticks, telling it apart from a reuse of its pid.
	ProcStart(pid int) (uint64, error)
	// Alive reports whether pid is still the process that started at tick start (0: any).
	Alive(pid int, start uint64) bool
	// StopProcess sends SIGTERM, waits up to grace, then SIGKILLs; a gone process is nil.
	StopProcess(pid int, start uint64, grace time.Duration) error
	// Supervise is the package's Supervise, run in this process (superviseHere).
	Supervise(ctx context.Context, st *State, adopt int, wanted func() bool, logOut *os.File) error
}

// linuxHost is hostOps on this machine.
type linuxHost struct{}

var _ hostOps = linuxHost{}

func (linuxHost) CurrentNetns() (uint64, error) { return currentNetnsInode() }
func (linuxHost) NetnsExists(name string) bool  { return netnsExists(name) }
func (linuxHost) CreateNetns(name string) error { return createNetns(name) }

func (linuxHost) AddrsIn(subnet netip.Prefix) ([]netip.Addr, error) { return addrsIn(subnet) }
func (linuxHost) DeleteNetns(name string) error                     { return deleteNetns(name) }
func (linuxHost) LoopbackUp(name string) error                      { return loopbackUp(name) }

func (linuxHost) WireLink(netns, hostVeth string, l link, raw []netip.Prefix) error {
	return wireLink(netns, hostVeth, l, raw)
}

func (linuxHost) DeleteHostVeth(hostVeth string, hostNetns uint64, supervisorPid int) error {
	return deleteHostVeth(hostVeth, hostNetns, supervisorPid)
}

func (linuxHost) ReleaseHostVeth(hostVeth string, hostNetns uint64, supervisorPid int) error {
	return releaseHostVeth(hostVeth, hostNetns, supervisorPid)
}

func (linuxHost) WriteNetnsResolvConf(netns string, data []byte) error {
	dir := filepath.Join(etcNetnsDir, netns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return writeFileReplace(filepath.Join(dir, "resolv.conf"), data, 0o644)
}

func (linuxHost) RemoveNetnsEtc(netns string) error {
	if err := os.RemoveAll(filepath.Join(etcNetnsDir, netns)); err != nil {
		return fmt.Errorf("remove %s: %w", filepath.Join(etcNetnsDir, netns), err)
	}
	return nil
}

func (linuxHost) CheckCgroup2Dir(path string) error { return checkCgroup2Dir(path) }

func (linuxHost) ClaimIDRange(base uint32, owner string) (uint32, string, error) {
	return claimIDRange(base, owner)
}

func (linuxHost) ReleaseIDRange(claim string) error      { return releaseIDRange(claim) }
func (linuxHost) StrayIDClaims(storeDir string) []string { return strayIDClaims(storeDir) }

func (linuxHost) WriteBundle(st *State) error {
	if err := makeDisk(st); err != nil {
		return err
	}
	return writeBundle(st)
}

func (linuxHost) WriteBundleEtc(st *State) error { return writeBundleEtc(st) }

func (linuxHost) RunContainer(st *State, logFile string) error { return runContainer(st, logFile) }
func (linuxHost) CreateContainer(st *State, op *OnceProcess, logFile string) <-chan error {
	return createContainer(st, op, logFile)
}
func (linuxHost) StartContainer(st *State) (int, error) { return startContainer(st) }

func (linuxHost) DeleteContainer(st *State) error {
	c := st.Container
	err := deleteContainer(st)
	if c.Image != nil { // before the disk: the overlay's upper layer may be on it
		if uerr := unmountImageRootfs(st); uerr != nil {
			return errors.Join(err, uerr) // never remove the bundle through a mounted root
		}
	}
	if derr := releaseDisk(c.Disk); derr != nil {
		return errors.Join(err, derr) // the bundle holds the disk's mount point: it stays
	}
	if rerr := os.RemoveAll(c.Bundle); rerr != nil {
		err = errors.Join(err, fmt.Errorf("remove bundle: %w", rerr))
	}
	return err
}

func (linuxHost) CgroupExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (linuxHost) CreateCgroup(path string, lim Limits) error { return createCgroup(path, lim) }

func (linuxHost) RemoveCgroup(ctx context.Context, path string) error {
	return removeCgroup(ctx, path)
}

func (linuxHost) ChildCgroups(parent string) ([]string, error) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, fmt.Errorf("read cgroup %s: %w", parent, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func (linuxHost) StartDetached(bin string, args, env []string, logFile string) (int, <-chan struct{}, error) {
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	// Reap it if it exits while this process still runs; once this process exits it is
	// re-parented and runs on.
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd.Process.Pid, done, nil
}

func (linuxHost) ProcStart(pid int) (uint64, error) { return procStart(pid) }
func (linuxHost) Alive(pid int, start uint64) bool  { return alive(pid, start) }
func (linuxHost) Supervise(ctx context.Context, st *State, adopt int, wanted func() bool, logOut *os.File) error {
	return Supervise(ctx, st, adopt, wanted, logOut)
}
func (linuxHost) StopProcess(pid int, start uint64, grace time.Duration) error {
	return stopProcess(pid, start, grace)
}
func (linuxHost) HybridCgroups() bool { return hybridCgroups() }
