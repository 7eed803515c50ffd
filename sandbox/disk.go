package sandbox

import (
	"fmt"
	"path/filepath"
)

// MinDiskSize is the smallest --disk: below it ext4's own metadata takes a large share.
const MinDiskSize = 16 << 20

// Subdirectories of a sandbox's disk: the sandbox's /tmp and its working directory.
const (
	diskTmp  = "tmp"
	diskWork = "work"
)

// DiskState is a sandbox's disk (--disk SIZE): an ext4 filesystem in an image file of SIZE
// bytes, reserved in full on the host when it is made, attached to a loop device and mounted
// where the container's writable directories come from. What the sandbox writes outside its
// --mounts lands there and nowhere else, so SIZE caps it and the host's free space does not
// move.
type DiskState struct {
	Size  int64  `json:"size"`           // bytes, the image's size
	Image string `json:"image"`          // the image file, in the sandbox's state directory
	Mount string `json:"mount"`          // where it is mounted on the host, in the bundle directory
	Loop  string `json:"loop,omitempty"` // the loop device, once attached (it goes with the mount)
}

// planDisk is the disk of st's container for --disk size (nil for none): its image in the
// sandbox's state directory, its mount point in the bundle directory (which the runtime,
// binding from inside the sandbox's user namespace, can traverse). Planned before anything
// is built, the paths are in the state file, so undo, delete and reap can always find them.
func planDisk(size int64, st *State) (*DiskState, error) {
	if size == 0 {
		return nil, nil
	}
	if size < MinDiskSize {
		return nil, fmt.Errorf("--disk %d: at least %s", size, formatBytes(MinDiskSize))
	}
	return &DiskState{
		Size:  size &^ 4095, // whole ext4 blocks
		Image: filepath.Join(st.Dir, "disk.img"),
		Mount: filepath.Join(st.Container.Bundle, "disk"),
	}, nil
}

// writableDir is the one per-sandbox directory on the host that holds what the sandbox writes
// outside its --mounts, besides /tmp and the working directory (an image's overlay upper and
// work directories): the root of its disk with --disk, capped with the rest; "" without one.
func (c *ContainerState) writableDir() string {
	if c.Disk == nil {
		return ""
	}
	return c.Disk.Mount
}

// describe is the disk's part of the container step's line.
func (d *DiskState) describe(c *ContainerState) string {
	what := "/tmp and " + c.Workdir
	for _, m := range c.Mounts {
		if m.Dest == c.Workdir {
			what = "/tmp"
		}
	}
	return fmt.Sprintf("%s on a %s disk (ext4 on %s)", what, formatBytes(d.Size), d.Loop)
}
