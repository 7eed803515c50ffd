package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Phase is where a sandbox is in its life.
type Phase string

// The phases. A sandbox is saved in PhaseCreating before its first resource exists and in
// PhaseDeleting before its first resource goes, so a crash in between leaves a state file that
// names everything Reap must remove.
const (
	PhaseCreating Phase = "creating"
	PhaseReady    Phase = "ready"
	PhaseDeleting Phase = "deleting"
)

// State is everything the manager knows about one sandbox; it is the JSON state file.
type State struct {
	Name        string    `json:"name"`
	Backend     string    `json:"backend"`
	Phase       Phase     `json:"phase"`
	Created     time.Time `json:"created"`
	Policy      string    `json:"policy"`            // absolute path of the policy file the sidecar reads
	Profile     string    `json:"profile,omitempty"` // built-in profile the policy file was written from
	Environment string    `json:"environment"`

	Subnet      string   `json:"subnet"`       // the pool the /30 came from
	Index       int      `json:"index"`        // which /30 of Subnet
	HostAddr    string   `json:"host_addr"`    // host end of the veth; the sidecar listens here
	SandboxAddr string   `json:"sandbox_addr"` // sandbox end of the veth
	Netns       string   `json:"netns"`        // name under /run/netns
	HostNetns   uint64   `json:"host_netns"`   // inode of the namespace holding the host end
	HostVeth    string   `json:"host_veth"`
	Cgroup      string   `json:"cgroup"` // cgroup v2 directory of the sandbox
	Dir         string   `json:"dir"`    // per-sandbox directory: sidecar state, public files, log
	AdminAddr   string   `json:"admin_addr"`
	Limits      Limits   `json:"limits"`
	RawRoutes   []string `json:"raw_routes,omitempty"` // CIDRs routed to the host for protocol tcp rules
	Network     string   `json:"network,omitempty"`    // NetworkSidecar ("") or NetworkNone

	// Container is the OCI container the sandbox's commands run in.
	Container *ContainerState `json:"container,omitempty"`

	Binary      string   `json:"binary"`       // the airlock executable the supervisor runs
	SidecarArgs []string `json:"sidecar_args"` // arguments after "airlock"
	SidecarEnv  []string `json:"-"`            // environment for the supervisor; never saved (may hold secrets)

	CreatorPid     int    `json:"creator_pid,omitempty"`
	SupervisorPid  int    `json:"supervisor_pid,omitempty"`
	SupervisorTick uint64 `json:"supervisor_start,omitempty"` // start time in clock ticks: tells pid reuse apart
	// SupervisorInProcess says the supervisor is a goroutine of SupervisorPid, the process of
	// `exec --ephemeral` that waits for the sandbox's one command, not a process of its own.
	SupervisorInProcess bool `json:"supervisor_in_process,omitempty"`
	// SidecarInProcess says the sidecar, too, runs as goroutines of SupervisorPid (exec
	// --ephemeral with Manager.RunSidecar): no other process may signal that pid to stop it.
	SidecarInProcess bool `json:"sidecar_in_process,omitempty"`
	Kernel           bool `json:"kernel"` // eBPF enforcement attached

	// IdentityUIDs is the uid (and gid) inside of each identity `exec --as` has run
	// (identity_linux.go); an identity keeps its uid for the sandbox's life.
	IdentityUIDs map[string]int `json:"identity_uids,omitempty"`
	// identityCgroup is the identity cgroup Command placed its command in, for StartCommand.
	identityCgroup string
}

// Limits are the container's cgroup resource limits, set by the OCI runtime on whichever
// hierarchy holds the controller (v2, or v1 on a hybrid host). In CreateOptions zero means the
// default (DefaultMemory, DefaultPids; no CPU limit).
type Limits struct {
	CPU    float64 `json:"cpu,omitempty"`    // CPUs (cpu.max, or the v1 CFS quota)
	Memory int64   `json:"memory,omitempty"` // bytes (memory.max, or memory.limit_in_bytes)
	Pids   int     `json:"pids,omitempty"`   // tasks (pids.max)
}

// Paths of the files inside a sandbox's Dir.
func (s *State) sidecarStateDir() string { return filepath.Join(s.Dir, "sidecar") }

// SidecarStateDir is the sandbox's sidecar's --state-dir (its CA, grants and operator
// socket of approvals).
func (s *State) SidecarStateDir() string { return s.sidecarStateDir() }

// PublicDir holds what the sandbox may read: the env file, the CA bundle and resolv.conf.
func (s *State) PublicDir() string { return filepath.Join(s.Dir, "public") }

// EnvFile is the env file (KEY=VALUE lines) that points clients at the sidecar.
func (s *State) EnvFile() string { return filepath.Join(s.PublicDir(), "env") }

// CABundle is the trust store for the sandbox: the host's roots plus the sidecar CA.
func (s *State) CABundle() string { return filepath.Join(s.PublicDir(), "ca-bundle.pem") }

// ResolvConf points the sandbox's resolver at its DNS filter.
func (s *State) ResolvConf() string { return filepath.Join(s.PublicDir(), "resolv.conf") }

// runtimeLog collects the OCI runtime's output.
func (s *State) runtimeLog() string { return filepath.Join(s.Dir, "runtime.log") }

// LogFile collects the supervisor's and the sidecar's output.
func (s *State) LogFile() string { return filepath.Join(s.Dir, "sidecar.log") }

// ephemeral says s lives for one command (`exec --ephemeral`: ContainerState.Once). Its
// state file and the sidecar's CA are renamed into place whole, never seen half-written, but
// not fsynced: a crash of the host ends everything such a sandbox had in the kernel (its
// namespace, veth, cgroup, container, kernel programs, uid claim: all in memory or on /run),
// and `reap` removes a state file that a crash left empty (Store.EmptyStates). The fsyncs
// were most of what its create and delete waited for on a slow disk.
func (s *State) ephemeral() bool { return s.Container != nil && s.Container.Once }

// AuditLog is the sidecar's audit log (JSON lines).
func (s *State) AuditLog() string { return filepath.Join(s.Dir, "audit.log") }

// sidecarPidFile is where the supervisor records the running sidecar's pid.
func (s *State) sidecarPidFile() string { return filepath.Join(s.Dir, "sidecar.pid") }

// ErrNotFound is returned for a sandbox without a state file.
var ErrNotFound = errors.New("no such sandbox")

// Store keeps the state files of one state directory: DIR/sandboxes/NAME.json and
// DIR/sandboxes/NAME/.
type Store struct {
	// Dir is DIR/sandboxes.
	Dir string
	// StateRoot is DIR, the airlock state directory the store lives in.
	StateRoot string
}

// OpenStore opens (creating if needed, mode 0700) the sandbox store of the state directory.
func OpenStore(stateDir string) (*Store, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("state directory %s: %w", stateDir, err)
	}
	dir := filepath.Join(abs, "sandboxes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox store %s: %w", dir, err)
	}
	return &Store{Dir: dir, StateRoot: abs}, nil
}

// Lock takes the store's exclusive lock (flock on DIR/sandboxes/.lock) and returns its release.
// Create, Delete and Reap hold it, so they never see each other's half-done work.
func (st *Store) Lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(st.Dir, ".lock"), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock sandbox store %s: %w", st.Dir, err)
	}
	return func() { f.Close() }, nil // closing the last descriptor releases the flock
}

func (st *Store) path(name string) string { return filepath.Join(st.Dir, name+".json") }

// SandboxDir is the per-sandbox directory of name.
func (st *Store) SandboxDir(name string) string { return filepath.Join(st.Dir, name) }

// Save writes s atomically: a temporary file, fsync, rename, fsync of the directory. The
// state of an ephemeral sandbox (State.ephemeral) is renamed into place whole but not
// fsynced.
func (st *Store) Save(s *State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state of %s: %w", s.Name, err)
	}
	return writeFile(st.path(s.Name), append(data, '\n'), 0o600, !s.ephemeral())
}

// Load reads the state of name; ErrNotFound when there is none.
func (st *Store) Load(name string) (*State, error) {
	data, err := os.ReadFile(st.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read state of %s: %w", name, err)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("state file %s is empty: a crash of the host left it (`airlock sandbox reap` removes it)", st.path(name))
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("state file %s: %w", st.path(name), err)
	}
	return &s, nil
}

// List loads every state file, sorted by name. A state file that does not parse is returned
// as an error next to the others.
func (st *Store) List() ([]*State, error) {
	entries, err := os.ReadDir(st.Dir)
	if err != nil {
		return nil, fmt.Errorf("read sandbox store: %w", err)
	}
	var out []*State
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || ValidateName(name) != nil {
			continue
		}
		s, err := st.Load(name)
		if err != nil {
			if !errors.Is(err, ErrNotFound) { // removed meanwhile
				errs = append(errs, err)
			}
			continue
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// EmptyStates returns the names of the state files that are empty: only a crash of the host
// makes one (an ephemeral sandbox's state file was renamed into place but never fsynced;
// every write is whole), and what that sandbox had in the kernel ended with the crash.
func (st *Store) EmptyStates() []string {
	entries, err := os.ReadDir(st.Dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() || ValidateName(name) != nil {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Size() == 0 {
			out = append(out, name)
		}
	}
	return out
}

// Remove deletes the state file and the sandbox directory of name, durably.
func (st *Store) Remove(name string) error { return st.remove(name, true) }

// RemoveState is Remove for s, durably unless s is ephemeral (State.ephemeral).
func (st *Store) RemoveState(s *State) error { return st.remove(s.Name, !s.ephemeral()) }

func (st *Store) remove(name string, durable bool) error {
	errDir := os.RemoveAll(st.SandboxDir(name))
	errFile := os.Remove(st.path(name))
	if errors.Is(errFile, fs.ErrNotExist) {
		errFile = nil
	}
	if err := errors.Join(errDir, errFile); err != nil {
		return fmt.Errorf("remove state of %s: %w", name, err)
	}
	if !durable {
		return nil
	}
	return syncDir(st.Dir)
}

// writeFileAtomic replaces path with data so that a reader sees the old or the new content,
// never a mix, and a crash leaves one of them.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, data, perm, true)
}

// writeFileReplace is writeFileAtomic without the fsyncs, for files that are rebuilt after a
// crash anyway (the sandbox's public files, pid files): readers never see a partial file.
func writeFileReplace(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, data, perm, false)
}

func writeFile(path string, data []byte, perm os.FileMode, durable bool) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
