package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// checkRuntime finds the OCI runtime and asks its version.
func (m *Manager) checkRuntime(ctx context.Context, o DoctorOptions) Check {
	name := o.Runtime
	if name == "" {
		name = DefaultRuntime
	}
	rt, err := resolveRuntime(name)
	if err != nil {
		return fail(err.Error(), fmt.Sprintf("apt-get install %s (or pass --runtime PATH to an OCI runtime)", filepath.Base(name)))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, rt, "--version").CombinedOutput()
	if err != nil {
		return fail(fmt.Sprintf("%s --version: %v: %s", rt, err, bytes.TrimSpace(out)), "reinstall it: apt-get install --reinstall "+filepath.Base(rt))
	}
	first, _, _ := strings.Cut(string(out), "\n")
	detail := rt + ": " + strings.TrimSpace(first)
	if filepath.Base(rt) == "crun" && hybridCgroups() {
		detail += "; hybrid host: airlock places its containers in their cgroups and sets the limits itself"
	}
	return pass(detail)
}

// checkUserns checks that user namespaces can be made, and that the uid ranges sandboxes get
// are free of the host's users.
func (m *Manager) checkUserns(context.Context, DoctorOptions) Check {
	data, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return fail("user namespaces: "+err.Error(), "use a kernel built with CONFIG_USER_NS")
	}
	if strings.TrimSpace(string(data)) == "0" {
		return fail("user.max_user_namespaces is 0", "sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d)")
	}
	claims, _ := claimedStarts()
	for _, id := range hostUserIDs() {
		if id >= DefaultIDBase && id < DefaultIDBase+MaxIDRanges*IDRangeSize {
			return warn(fmt.Sprintf("host id %d lies in the sandboxes' uid ranges (from %d)", id, uint64(DefaultIDBase)),
				"give create --id-base a start above the host's users; those ranges are skipped meanwhile")
		}
	}
	return pass(fmt.Sprintf("max %s; sandbox uid/gid ranges of %d from %d, %d in use", strings.TrimSpace(string(data)), IDRangeSize, uint64(DefaultIDBase), len(claims)))
}

// checkOverlay checks what sandboxes of an image (create --image) need: overlayfs, and
// idmapped mounts on the state directory's filesystem (where the layer cache lives).
func (m *Manager) checkOverlay(context.Context, DoctorOptions) Check {
	data, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return warn(err.Error(), "")
	}
	if !bytes.Contains(data, []byte("\toverlay\n")) {
		return warn("overlayfs is not in /proc/filesystems: create --image cannot work", "modprobe overlay")
	}
	if m.Store == nil {
		return pass("overlay in /proc/filesystems")
	}
	if err := probeIdmap(m.Store.StateRoot); err != nil {
		return warn(fmt.Sprintf("overlay in /proc/filesystems, but %v: create --image cannot work", err),
			"put the state directory on ext4, xfs or btrfs (kernel 5.12+; overlayfs over idmapped layers needs 5.19+)")
	}
	return pass("overlay in /proc/filesystems; idmapped mounts work on the state directory (create --image)")
}

// checkCgroupLayout says where the limits of a sandbox will be: v2, or the v1 memory and pids
// hierarchies of a hybrid host (the processes stay in the v2 cgroup with the kernel programs).
func (m *Manager) checkCgroupLayout(context.Context, DoctorOptions) Check {
	if !hybridCgroups() {
		return pass("cgroup v2 only: limits in the sandbox's v2 cgroup")
	}
	var missing []string
	for _, h := range []string{"memory", "pids"} {
		if !isCgroupV1(filepath.Join(cgroupV1Root, h)) {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		return fail("hybrid host without the v1 "+strings.Join(missing, ", ")+" hierarchy: those limits cannot be set",
			"mount them (mount -t cgroup -o "+strings.Join(missing, ",")+" cgroup /sys/fs/cgroup/...) or boot with cgroup v2 only (systemd.unified_cgroup_hierarchy=1)")
	}
	return pass("hybrid: processes in the v2 cgroup that carries the kernel programs, memory, pids and cpu limits in v1")
}
