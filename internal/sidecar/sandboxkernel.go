package sidecar

import (
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/sandbox"
)

// SandboxKernel is the sandbox manager's view of package ebpf (sandbox declares the interface
// so that it does not link cilium/ebpf): programs pinned under ebpf.DefaultPinRoot, the
// probes `sandbox doctor` runs, and the mount table.
func SandboxKernel() sandbox.Kernel { return sandboxKernel{} }

type sandboxKernel struct{}

var _ sandbox.Kernel = sandboxKernel{}

func (sandboxKernel) Cgroup2Root() (string, error) { return ebpf.Cgroup2Root() }

func (sandboxKernel) PinDir(name string) string {
	return filepath.Join(ebpf.DefaultPinRoot, ebpf.PinDirName(name))
}

func (k sandboxKernel) Pinned(name string) bool {
	entries, err := os.ReadDir(k.PinDir(name))
	return err == nil && len(entries) > 0
}

func (sandboxKernel) RemovePins(name string) error { return ebpf.Remove("", name) }

// AttachDenyAll attaches and pins the programs with no listener and no CIDR, then lets go of
// them: the pins keep the cgroup enforced, denying every connection but loopback.
func (sandboxKernel) AttachDenyAll(name, cgroup string) error {
	e, err := ebpf.Open(ebpf.Config{Sandbox: name, Cgroup: cgroup})
	if err != nil {
		return err
	}
	return e.Close()
}

func (sandboxKernel) Probe() error { return ebpf.Probe() }

func (sandboxKernel) ProbePacketGuard() error { return ebpf.ProbePacketGuard() }

func (sandboxKernel) BPFLSMActive() (bool, error) { return ebpf.BPFLSMActive() }

func (sandboxKernel) MountPoints(types ...string) ([]string, error) {
	mounts, err := ebpf.Mounts(types...)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Point)
	}
	return out, nil
}
