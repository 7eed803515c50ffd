package meter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Cgroup is where a sandbox's figures are read from and where it is frozen: its cgroup v2
// directory (which carries the kernel programs) and, on a hybrid host whose v2 hierarchy has
// no memory controller, its directories in the v1 memory, cpuacct and freezer hierarchies.
// An empty field means that hierarchy is not used.
type Cgroup struct {
	// V2 is the sandbox's cgroup v2 directory (airlock run --cgroup).
	V2 string
	// V1Memory, V1CPUAcct and V1Freezer are the same cgroup in the v1 hierarchies, when they
	// exist (a hybrid host: runc, crun and airlock put the container there under the same
	// path relative to each hierarchy's root).
	V1Memory, V1CPUAcct, V1Freezer string
}

// FindCgroup returns the sandbox's cgroup for its v2 directory: on a hybrid host the v1
// directories at the same path relative to their hierarchy's root are added for every v1
// memory, cpuacct and freezer hierarchy mounted. mountinfo is /proc/self/mountinfo's text.
func FindCgroup(v2 string, mountinfo []byte) Cgroup {
	c := Cgroup{V2: v2}
	mounts := parseCgroupMounts(mountinfo)
	rel := ""
	for _, m := range mounts {
		if m.v2 {
			if r, ok := strings.CutPrefix(v2, strings.TrimSuffix(m.dir, "/")+"/"); ok {
				rel = r
			}
		}
	}
	if rel == "" {
		return c
	}
	for _, m := range mounts {
		if m.v2 {
			continue
		}
		// Not checked for existence: the sidecar starts before the runtime makes the
		// container's v1 cgroups; until they exist they are read as absent.
		dir := filepath.Join(m.dir, rel)
		switch {
		case slices.Contains(m.controllers, "memory"):
			c.V1Memory = dir
		case slices.Contains(m.controllers, "cpuacct"):
			c.V1CPUAcct = dir
		case slices.Contains(m.controllers, "freezer"):
			c.V1Freezer = dir
		}
	}
	return c
}

// cgroupMount is one cgroup filesystem mount.
type cgroupMount struct {
	dir         string
	v2          bool
	controllers []string // v1: the super options naming controllers
}

// parseCgroupMounts reads the cgroup and cgroup2 mounts of a mountinfo text (proc(5)):
// "id parent maj:min root mountpoint options [optional...] - fstype source superoptions".
// Only mounts of the hierarchy's root ("/") count: a bind of a sub-cgroup does not map
// relative paths.
func parseCgroupMounts(mountinfo []byte) []cgroupMount {
	var out []cgroupMount
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 5 || len(f) < sep+4 || f[3] != "/" {
			continue
		}
		switch f[sep+1] {
		case "cgroup2":
			out = append(out, cgroupMount{dir: f[4], v2: true})
		case "cgroup":
			out = append(out, cgroupMount{dir: f[4], controllers: strings.Split(f[sep+3], ",")})
		}
	}
	return out
}

// CgroupStats are a cgroup's own counters, read once.
type CgroupStats struct {
	// CPUUserUsec and CPUSystemUsec are the CPU time of the cgroup's processes, living and
	// dead, since it was made (cpu.stat user_usec and system_usec; v1 cpuacct.usage_user and
	// usage_sys).
	CPUUserUsec, CPUSystemUsec uint64
	// MemoryBytes is the memory in use now (memory.current; v1 memory.usage_in_bytes);
	// MemoryPeakBytes the most it has used (memory.peak; v1 memory.max_usage_in_bytes). Both
	// are 0 when no hierarchy counts the cgroup's memory (HasMemory false).
	MemoryBytes, MemoryPeakBytes uint64
	HasMemory                    bool
}

// ErrNoCgroup means the sandbox's cgroup is gone (deleted, or never made).
var ErrNoCgroup = errors.New("the sandbox's cgroup does not exist")

// Read reads the cgroup's counters. It returns an error wrapping ErrNoCgroup when the v2
// directory is gone.
func (c Cgroup) Read() (CgroupStats, error) {
	var s CgroupStats
	if _, err := os.Stat(c.V2); errors.Is(err, fs.ErrNotExist) {
		return s, fmt.Errorf("read cgroup %s: %w", c.V2, ErrNoCgroup)
	}
	if err := c.readCPU(&s); err != nil {
		return s, err
	}
	return s, c.readMemory(&s)
}

// readCPU reads cpu.stat, which the v2 core keeps for every cgroup whatever its controllers
// (so the hybrid host's v2 cgroup has it too); cpuacct only where it does not.
func (c Cgroup) readCPU(s *CgroupStats) error {
	kv, err := readKeyed(filepath.Join(c.V2, "cpu.stat"))
	if err == nil {
		s.CPUUserUsec, s.CPUSystemUsec = kv["user_usec"], kv["system_usec"]
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) || c.V1CPUAcct == "" {
		return err
	}
	user, err := readUint(filepath.Join(c.V1CPUAcct, "cpuacct.usage_user"))
	if err != nil {
		return err
	}
	sys, err := readUint(filepath.Join(c.V1CPUAcct, "cpuacct.usage_sys"))
	if err != nil {
		return err
	}
	s.CPUUserUsec, s.CPUSystemUsec = user/1000, sys/1000
	return nil
}

// readMemory reads the v2 memory files when the memory controller is on for the cgroup, else
// the v1 memory hierarchy's. Neither is not an error: the sandbox then has no memory figures.
func (c Cgroup) readMemory(s *CgroupStats) error {
	cur, err := readUint(filepath.Join(c.V2, "memory.current"))
	if err == nil {
		s.MemoryBytes, s.HasMemory = cur, true
		// memory.peak is Linux 5.19 and later; before it the current value is all there is.
		if peak, err := readUint(filepath.Join(c.V2, "memory.peak")); err == nil {
			s.MemoryPeakBytes = peak
		}
		s.MemoryPeakBytes = max(s.MemoryPeakBytes, cur)
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if c.V1Memory == "" {
		return nil
	}
	if s.MemoryBytes, err = readUint(filepath.Join(c.V1Memory, "memory.usage_in_bytes")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // not made yet (the container is not created), or gone
		}
		return err
	}
	if s.MemoryPeakBytes, err = readUint(filepath.Join(c.V1Memory, "memory.max_usage_in_bytes")); err != nil {
		return err
	}
	s.HasMemory = true
	return nil
}

// Freeze freezes (true) or thaws (false) every process of the cgroup and its children:
// cgroup.freeze, which the v2 core has for every cgroup but the root (on a hybrid host's v2
// hierarchy too), else the v1 freezer.
func (c Cgroup) Freeze(on bool) error {
	v, state := "0", "THAWED"
	if on {
		v, state = "1", "FROZEN"
	}
	err := os.WriteFile(filepath.Join(c.V2, "cgroup.freeze"), []byte(v), 0o644)
	if errors.Is(err, fs.ErrNotExist) && c.V1Freezer != "" {
		err = os.WriteFile(filepath.Join(c.V1Freezer, "freezer.state"), []byte(state), 0o644)
	}
	if err != nil {
		return fmt.Errorf("write %s to the freezer of cgroup %s: %w", v, c.V2, err)
	}
	return nil
}

// Frozen reports whether every process of the cgroup is frozen now (cgroup.events "frozen
// 1"; v1 freezer.state FROZEN).
func (c Cgroup) Frozen() (bool, error) {
	kv, err := readKeyed(filepath.Join(c.V2, "cgroup.events"))
	if err == nil {
		if _, ok := kv["frozen"]; ok {
			return kv["frozen"] == 1, nil
		}
	}
	if c.V1Freezer != "" {
		b, err := os.ReadFile(filepath.Join(c.V1Freezer, "freezer.state"))
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(b)) == "FROZEN", nil
	}
	if err == nil {
		err = fmt.Errorf("cgroup %s: no frozen line in cgroup.events", c.V2)
	}
	return false, err
}

// readKeyed reads a flat keyed cgroup file ("key value" lines).
func readKeyed(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// readUint reads a cgroup file holding one unsigned number.
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return n, nil
}
