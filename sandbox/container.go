package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Defaults of a local sandbox's container, applied when create is given no flag for them.
const (
	// DefaultRuntime is the OCI runtime that runs the container (Debian's runc).
	DefaultRuntime = "runc"
	// DefaultMemory is the memory limit in bytes (2 GiB).
	DefaultMemory = 2 << 30
	// DefaultPids is the task limit.
	DefaultPids = 1024
	// DefaultTmpSize caps the private /tmp and the working directory, each a tmpfs (512 MiB).
	DefaultTmpSize = 512 << 20
	// DefaultWorkdir is the private writable working directory inside, and the commands' cwd.
	DefaultWorkdir = "/work"
	// DefaultIDBase is the first host uid and gid handed to sandboxes: sandbox n maps its
	// uids and gids 0-65535 to DefaultIDBase + n*IDRangeSize onwards. It lies above the ranges
	// Debian and systemd give users, dynamic users and nspawn containers (below 0x70000000)
	// and below systemd's foreign range (0x7FFF0000).
	DefaultIDBase = 0x70000000
	// IDRangeSize is how many uids (and gids) each sandbox gets.
	IDRangeSize = 65536
	// MaxIDRanges bounds the ranges handed out from an id base (4094 from the default).
	MaxIDRanges = 4094
)

// Network modes of a local sandbox.
const (
	// NetworkSidecar is the default: a veth to the sandbox's own sidecar.
	NetworkSidecar = ""
	// NetworkNone is loopback only: no veth, no sidecar, no DNS.
	NetworkNone = "none"
)

// Paths inside a sandbox's container.
const (
	// InsideCABundle is the CA bundle inside the sandbox (the path pods use too).
	InsideCABundle = "/etc/airlock/ca/ca-bundle.pem"
	// InsideEnvFile is the env file inside the sandbox.
	InsideEnvFile = "/etc/airlock/env"
)

// Mount is a host directory or file the sandbox sees at Dest (--mount SRC:DST[:ro|rw]).
type Mount struct {
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	Writable bool   `json:"writable,omitempty"`
}

// ParseMount reads SRC:DST[:ro|rw]: absolute paths, read-only unless rw. SRC must exist.
func ParseMount(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return Mount{}, fmt.Errorf("--mount %q: want SRC:DST[:ro|rw]", s)
	}
	m := Mount{Source: parts[0], Dest: parts[1]}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
		case "rw":
			m.Writable = true
		default:
			return Mount{}, fmt.Errorf("--mount %q: the mode is ro or rw, not %q", s, parts[2])
		}
	}
	if !filepath.IsAbs(m.Source) {
		return Mount{}, fmt.Errorf("--mount %q: SRC must be an absolute path", s)
	}
	m.Source = filepath.Clean(m.Source)
	if _, err := os.Stat(m.Source); err != nil {
		return Mount{}, fmt.Errorf("--mount %q: %w", s, err)
	}
	dest, err := checkInsidePath(m.Dest)
	if err != nil {
		return Mount{}, fmt.Errorf("--mount %q: DST %w", s, err)
	}
	m.Dest = dest
	return m, nil
}

// reservedInside are the container paths a --mount or --workdir may not cover or sit under:
// the runtime's own filesystems and airlock's files.
var reservedInside = []string{"/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/tmp"}

// checkInsidePath cleans an absolute path inside the sandbox and refuses "/" and the reserved
// system paths.
func checkInsidePath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("%q must be an absolute path", p)
	}
	p = path.Clean(p)
	if p == "/" {
		return "", errors.New("may not be /")
	}
	for _, r := range reservedInside {
		if p == r || strings.HasPrefix(p, r+"/") {
			return "", fmt.Errorf("%q: %s belongs to the sandbox's system view", p, r)
		}
	}
	return p, nil
}

// ContainerState is what a local sandbox's container is: which runtime runs it, where its
// bundle and the runtime's state live, and what it maps and mounts.
type ContainerState struct {
	Runtime string `json:"runtime"` // absolute path of the OCI runtime
	Root    string `json:"root"`    // the runtime's private --root
	ID      string `json:"id"`      // the container id under Root
	Bundle  string `json:"bundle"`  // config.json and rootfs/
	// IDBase is the first host uid and gid of the sandbox's range (0 before one is claimed);
	// IDClaim is the host-wide claim file that reserves it.
	IDBase      uint32 `json:"id_base,omitempty"`
	IDClaim     string `json:"id_claim,omitempty"`
	CgroupsPath string `json:"cgroups_path"` // the OCI cgroupsPath: the cgroup relative to each hierarchy's root
	// SelfCgroups says airlock, not the runtime, places the container's processes in their
	// cgroups and sets the limits (crun on a hybrid host: see v1LimitDirs); Global then holds
	// the runtime flag that turns its cgroup support off.
	SelfCgroups bool `json:"self_cgroups,omitempty"`
	// Once says the container is not started by create: OnceCommand runs one command as it.
	Once bool `json:"once,omitempty"`
	// Waiting says create had the runtime create the container with its one command
	// (CreateOptions.OnceProcess), which waits for StartOnce.
	Waiting bool `json:"waiting,omitempty"`
	// Rootless says the runtime runs as the sandbox's uid (IDBase), not as root (runsc).
	Rootless bool     `json:"rootless,omitempty"`
	Global   []string `json:"global,omitempty"`
	Workdir  string   `json:"workdir"`
	TmpSize  int64    `json:"tmp_size"`
	Mounts   []Mount  `json:"mounts,omitempty"`
	// Disk holds /tmp and the working directory in place of the tmpfs (--disk), or is nil.
	Disk *DiskState `json:"disk,omitempty"`
	// Image is the image the root filesystem is built from (create --image); nil: the
	// host's read-only view.
	Image *Image `json:"image,omitempty"`
	// WorkdirInImage says the working directory is the image's WorkingDir, in its root
	// filesystem (no tmpfs over it).
	WorkdirInImage bool `json:"workdir_in_image,omitempty"`
	// User is the commands' default uid and gid (the image's USER); nil: root. Home is their
	// HOME ("" : the working directory).
	User *IDs   `json:"user,omitempty"`
	Home string `json:"home,omitempty"`

	// spec is the config.json writeBundle made, kept for a container made with its one
	// command (Waiting): createContainer gives it its process and writes it, once.
	spec *specs.Spec
}

// etcAfterCreate says the bundle's /etc is written in two parts: what the runtime's create
// reads before it (writeEtcUsers), the rest while the runtime creates the container (the
// create's files step, writeBundleEtc), so that the create starts earlier. Only for a container
// made with its one command (Waiting: its process starts after every create step) on the
// host's view (an image's /etc files are bind-mount sources the create needs).
func (c *ContainerState) etcAfterCreate() bool { return c.Waiting && c.Image == nil }

// resolveRuntime finds the runtime binary: a name on PATH (runc, crun) or a path.
func resolveRuntime(name string) (string, error) {
	if name == "" {
		name = DefaultRuntime
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("--runtime %s: %w (install it: apt-get install %s, or run `airlock sandbox doctor`)", name, err, filepath.Base(name))
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("--runtime %s: %w", name, err)
	}
	return abs, nil
}

// bundleRoot holds the sandboxes' bundles. It is outside the state directory (mode 0700): the
// runtime mounts from inside the sandbox's user namespace, as the unprivileged mapped root, so
// the root filesystem's path must be traversable by it.
const bundleRoot = "/run/airlock/bundles"

// runtimeStateRoot holds the runtimes' private --root directories, one per state directory
// and runtime (runtimeRootDir). It is on /run, a tmpfs on most hosts: what the runtime keeps
// there (its state.json, written with fsync, and runc's copy of its own binary for each
// container process it starts) describes processes that a reboot ends anyway, so it need not
// be written to the state directory's disk on the path of every create and exec.
const runtimeStateRoot = "/run/airlock/runtime"

// runtimeRootDir is the --root of runtime for the sandboxes of the store in storeDir: private
// to that store (two state directories may hold sandboxes of the same name, and `delete` and
// `reap` must never meet another store's containers or the host's own).
func runtimeRootDir(storeDir, runtime string) string {
	sum := sha256.Sum256([]byte(storeDir))
	return filepath.Join(runtimeStateRoot, hex.EncodeToString(sum[:5]), filepath.Base(runtime))
}

// idClaimDir holds one claim file per id range in use, host-wide (every state directory).
// (A variable for the tests.)
var idClaimDir = "/run/airlock/idmap"
