package ebpf

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo: the filesystem type, the mount point and the
// root of the mount within its filesystem ("/" for a cgroup2 mount of this process's cgroup
// namespace root).
type Mount struct {
	Type, Point, Root string
}

// Mounts lists this process's mounts of the given filesystem types (every mount when none is
// given), in mountinfo order, with mountinfo's octal escapes undone.
func Mounts(types ...string) ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var out []Mount
	for _, line := range strings.Split(string(data), "\n") {
		// "36 35 98:0 / /mnt rw,noatime master:1 - cgroup2 cgroup2 rw"
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) == 0 || (len(types) > 0 && !slices.Contains(types, qf[0])) {
			continue
		}
		out = append(out, Mount{Type: qf[0], Point: unescapeMountinfo(pf[4]), Root: unescapeMountinfo(pf[3])})
	}
	return out, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
