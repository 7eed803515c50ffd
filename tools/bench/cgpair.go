package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
)

// cgroupPair is two sibling cgroups under the cgroup v2 root, one plain and one with the
// kernel programs attached and allow letting it reach one address: the kernel and usage
// sections run the same work in each, in turns.
type cgroupPair struct {
	plain, enforced string
	enf             *ebpf.Enforcer
	sandbox         string
}

// newCgroupPair makes the pair, named for label and this process. Close removes it.
func newCgroupPair(root, label string, allow netip.AddrPort) (*cgroupPair, error) {
	p := &cgroupPair{
		plain:    filepath.Join(root, fmt.Sprintf("airlock-bench-%s-plain-%d", label, os.Getpid())),
		enforced: filepath.Join(root, fmt.Sprintf("airlock-bench-%s-ebpf-%d", label, os.Getpid())),
		sandbox:  fmt.Sprintf("bench-%s-%d", label, os.Getpid()),
	}
	for _, d := range []string{p.plain, p.enforced} {
		if err := os.Mkdir(d, 0o755); err != nil {
			p.Close()
			return nil, fmt.Errorf("bench cgroup: %w", err)
		}
	}
	enf, err := ebpf.Open(ebpf.Config{Sandbox: p.sandbox, Cgroup: p.enforced})
	if err != nil {
		p.Close()
		return nil, err
	}
	p.enf = enf
	if err := enf.Allow(allow.Addr(), []uint16{allow.Port()}, time.Now().Add(time.Hour)); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close detaches the programs and removes both cgroups.
func (p *cgroupPair) Close() {
	if p.enf != nil {
		p.enf.Close()
		_ = ebpf.Remove("", p.sandbox)
	}
	_ = os.Remove(p.plain)
	_ = os.Remove(p.enforced)
}
