package sandbox

// Kernel is what the manager needs of the kernel enforcement (package ebpf) without linking
// it: where the cgroup v2 hierarchy is, whether a sandbox's programs are pinned, their removal,
// the doctor's probes and the mount table. The wiring supplies it (cmd/airlock passes
// ebpf.Host); the programs themselves are loaded and attached by each sandbox's sidecar.
type Kernel interface {
	// Cgroup2Root is the mount point of the cgroup v2 hierarchy; an error when none is mounted.
	Cgroup2Root() (string, error)
	// PinDir is the directory holding sandbox's pinned programs and maps.
	PinDir(sandbox string) string
	// Pinned reports whether sandbox's programs are pinned (its sidecar attached them).
	Pinned(sandbox string) bool
	// AttachDenyAll attaches and pins sandbox's programs on cgroup with nothing allowed (no
	// listener, no CIDR) but the sandbox's own loopback: a --network none sandbox, which is
	// alone in its network namespace and has no sidecar to attach them.
	AttachDenyAll(sandbox, cgroup string) error
	// RemovePins detaches and unpins sandbox's programs and maps; none pinned is not an error.
	RemovePins(sandbox string) error
	// Probe checks the kernel's BPF program, map and helper support the sidecar needs.
	Probe() error
	// ProbePacketGuard loads the BPF LSM packet socket guard alone, to see if it would attach.
	ProbePacketGuard() error
	// BPFLSMActive reports whether the BPF LSM is in the kernel's active LSM list.
	BPFLSMActive() (bool, error)
	// MountPoints lists this process's mount points of the given filesystem types.
	MountPoints(types ...string) ([]string, error)
}
