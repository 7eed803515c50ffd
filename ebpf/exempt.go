package ebpf

// The exemption (Config.ExemptCgroup): one cgroup below the enforced one whose tasks, and
// those of every cgroup below it, the programs let through untouched. In a Kubernetes pod the
// programs are attached to the pod's cgroup and the sidecar's own container cgroup is exempt.
//
// The programs compare the task's (or the packet socket's) ancestor at the exempt cgroup's
// level with its id, so the level is absolute: it is counted up to the root of the cgroup v2
// hierarchy, which must therefore be visible above the exempt directory.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf/link"
)

// maxCgroupLevel bounds the walk up to the hierarchy's root (the kernel has no limit by
// default, real hierarchies are a handful deep).
const maxCgroupLevel = 64

// isRootCgroup reports whether dir is the root of a cgroup v2 hierarchy: the only cgroup
// without a cgroup.type file.
func isRootCgroup(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, "cgroup.type"))
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return false, nil
}

// cgroupLevel returns the depth of the cgroup v2 directory dir in its hierarchy (the root
// is 0). It walks up the directories; it fails when it leaves the cgroup2 filesystem before
// it finds the root (only a subtree of the hierarchy is mounted there, as in a container's
// own cgroup namespace): the level is then unknown.
func cgroupLevel(dir string) (uint32, error) {
	dir = filepath.Clean(dir)
	for level := uint32(0); level <= maxCgroupLevel; level++ {
		p := dir
		for range level {
			p = filepath.Dir(p)
		}
		if err := checkCgroup2(p); err != nil {
			return 0, fmt.Errorf("cgroup %s: %s is not on the cgroup v2 filesystem, so the root of the hierarchy is not visible above it (mount the host's cgroup2 root): %w", dir, p, ErrInvalidConfig)
		}
		root, err := isRootCgroup(p)
		if err != nil {
			return 0, err
		}
		if root {
			return level, nil
		}
	}
	return 0, fmt.Errorf("cgroup %s: deeper than %d levels: %w", dir, maxCgroupLevel, ErrInvalidConfig)
}

// exemptionOf builds the exempt map's value for cfg: the zero value (nothing exempt) without
// ExemptCgroup.
func exemptionOf(cfg Config) (airlockExemption, error) {
	if cfg.ExemptCgroup == "" {
		return airlockExemption{}, nil
	}
	if err := checkCgroup2(cfg.ExemptCgroup); err != nil {
		return airlockExemption{}, err
	}
	id, err := cgroupID(cfg.ExemptCgroup)
	if err != nil {
		return airlockExemption{}, err
	}
	level, err := cgroupLevel(cfg.ExemptCgroup)
	if err != nil {
		return airlockExemption{}, err
	}
	cgLevel, err := cgroupLevel(cfg.Cgroup)
	if err != nil {
		return airlockExemption{}, err
	}
	if level <= cgLevel {
		return airlockExemption{}, invalidf("exempt cgroup %s must lie below the enforced cgroup %s", cfg.ExemptCgroup, cfg.Cgroup)
	}
	return airlockExemption{Id: id, Level: level}, nil
}

// checkNotRoot refuses the root of a cgroup v2 hierarchy as the enforced cgroup: every task
// of the machine, the sidecar included, would be enforced.
func checkNotRoot(dir string) error {
	root, err := isRootCgroup(dir)
	if err != nil {
		return err
	}
	if root {
		return invalidf("cgroup %s is the root of the cgroup v2 hierarchy: enforcing it would enforce the whole machine, the sidecar included", dir)
	}
	return nil
}

// checkPinsOwner refuses a pin directory whose links are attached to a cgroup other than
// cgroup that still exists. With an exempt cgroup (pod mode) that is another pod's sidecar
// using the same sandbox name on this node: taking its pins over would move its enforcement
// here (its pod unenforced) and write this sidecar's tables into its maps. Links whose
// cgroup is gone (a deleted pod) are not in the way.
func checkPinsOwner(dir, cgroup string) error {
	want, err := cgroupID(cgroup)
	if err != nil {
		return err
	}
	for _, a := range attachments {
		l, err := link.LoadPinnedLink(filepath.Join(dir, linkPrefix+a.name), nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open pinned link %s: %w", a.name, err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			continue // defunct
		}
		if c := info.Cgroup(); c != nil && c.CgroupId != 0 && c.CgroupId != want {
			return invalidf("the pins in %s are attached to another live cgroup (id %d), not %s: another pod on this node uses the same sandbox name; give every pod its own --sandbox", dir, c.CgroupId, cgroup)
		}
	}
	return nil
}

// RemoveDefunct removes the pins of every sandbox under pinRoot (empty: DefaultPinRoot)
// whose links all lost their cgroup (the cgroup was deleted, as a pod's is when the pod
// goes), and returns their names. A sandbox with a link on a live cgroup, or with no link
// pinned yet (a sidecar starting), is left alone. Pod-mode sidecars call it at start, since
// on a node nothing else deletes a finished pod's pins.
func RemoveDefunct(pinRoot string) ([]string, error) {
	if pinRoot == "" {
		pinRoot = DefaultPinRoot
	}
	entries, err := os.ReadDir(pinRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pin root: %w", err)
	}
	var removed []string
	var errs []error
	for _, ent := range entries {
		name := sandboxFromPinDir(ent.Name())
		if !ent.IsDir() || !sandboxName.MatchString(name) {
			continue
		}
		defunct, err := allLinksDefunct(filepath.Join(pinRoot, ent.Name()))
		if err != nil || !defunct {
			continue
		}
		if err := Remove(pinRoot, name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// allLinksDefunct reports whether dir holds at least one pinned link and none of them is
// attached to a cgroup.
func allLinksDefunct(dir string) (bool, error) {
	links := 0
	for _, a := range attachments {
		l, err := link.LoadPinnedLink(filepath.Join(dir, linkPrefix+a.name), nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		links++
		info, err := l.Info()
		l.Close()
		if err != nil {
			return false, err
		}
		if c := info.Cgroup(); c == nil || c.CgroupId != 0 {
			return false, nil
		}
	}
	return links > 0, nil
}
