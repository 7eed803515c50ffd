package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/internal/node"
	"github.com/airlock-dev/airlock/meter"
)

// usageComponent is the usage meter (package meter): it samples the sandbox's cgroup and
// kernel counters with the model API's spend every spec.usage.interval, keeps them in the
// state directory's usage ledger and enforces spec.usage.caps. It starts after kernel
// enforcement (whose counters it reads) and before the model API, so that it stops after
// it: the final record holds the spend of the calls that settled as the model API shut down.
type usageComponent struct {
	s *Sidecar

	// mu guards m, which the model API's admission reads from its handlers.
	mu sync.Mutex
	m  *meter.Meter

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

func (u *usageComponent) name() string { return "usage meter" }

// meter returns the running meter, or nil.
func (u *usageComponent) meter() *meter.Meter {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m
}

// admit is the model API's admission check: no new call while a usage cap is reached.
func (u *usageComponent) admit() error {
	if m := u.meter(); m != nil {
		return m.Admit()
	}
	return nil
}

// start opens the ledger, takes a first sample (which re-applies a freeze the last sidecar
// left) and samples in the background.
func (u *usageComponent) start(context.Context) error {
	s := u.s
	sandbox := s.cfg.Sandbox
	if sandbox == "" {
		sandbox = "default"
	}
	cfg := meter.Config{
		Key:         meter.Key{Sandbox: sandbox},
		Policy:      s.store,
		Ledger:      filepath.Join(s.cfg.StateDir, meter.LedgerFile),
		ThawRequest: filepath.Join(s.cfg.StateDir, meter.ThawFile),
		Audit:       s.audit,
		Logger:      s.log,
		Model:       u.modelSpend,
	}
	if s.cfg.Cgroup != "" {
		// A local sandbox: its cgroup is its own, so it may be read and frozen. A pod's
		// cgroup holds the sidecar too and is never frozen.
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return fmt.Errorf("usage meter: %w", err)
		}
		cg := meter.FindCgroup(s.cfg.Cgroup, mi)
		cfg.Cgroup = &cg
	}
	if pu, ok := s.kernel.enf.(podUsage); ok && len(s.cfg.IdentityContainers) > 0 {
		cfg.Containers = (&identityContainers{u: pu, containers: s.cfg.IdentityContainers, log: s.log}).read
	}
	if s.kernel.enf != nil {
		enf := s.kernel.enf
		cfg.Net = func() (meter.Net, error) {
			c, err := enf.Counters()
			return meter.Net{TxBytes: c.Bytes, RxBytes: c.RxBytes, Connections: c.Connections}, err
		}
	}
	m, err := meter.New(cfg)
	if err != nil {
		return err
	}
	if err := m.Open(); err != nil {
		return fmt.Errorf("--state-dir: %v", err)
	}
	if _, err := m.Sample(meter.KindSample); err != nil {
		s.log.WithError(err).Warn("usage sample failed")
	}
	if err := s.reg.Register(m.Collector()); err != nil {
		return fmt.Errorf("register usage metrics: %w", err)
	}
	u.mu.Lock()
	u.m = m
	u.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	u.cancel, u.done = cancel, make(chan struct{})
	go func() {
		defer close(u.done)
		m.Run(ctx)
	}()
	return nil
}

// podUsage is an Enforcer that reads the CPU time and memory of each running app container of
// the pod: the node agent's.
type podUsage interface {
	ContainerUsage() ([]node.ContainerUsage, error)
}

// identityContainers reads, for the meter, the running containers of a pod that are
// identities (--identity-containers): the pod's identities are metered from their
// containers' cgroups, which the node agent reads (its usage operation).
type identityContainers struct {
	u          podUsage
	containers map[string]string // container name to identity
	log        logrus.FieldLogger

	// unsupported is set once an agent answered that it has no usage operation (an agent
	// older than the sidecar): the identities then get no figures, logged once, until the
	// sidecar restarts.
	unsupported atomic.Bool
}

// read is meter.Config.Containers. Containers of no identity are left out: they are the
// pod's own, whose figures the pod's record would hold.
func (ic *identityContainers) read() ([]meter.ContainerStats, error) {
	if ic.unsupported.Load() {
		return nil, nil
	}
	us, err := ic.u.ContainerUsage()
	if err != nil && strings.Contains(err.Error(), `unknown operation "`+node.OpUsage+`"`) {
		ic.unsupported.Store(true)
		ic.log.WithError(err).Warn("the node agent cannot read the containers' usage (older than the sidecar): the identities get no CPU or memory figures; upgrade the node agents")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []meter.ContainerStats
	for _, u := range us {
		id, ok := ic.containers[u.Container]
		if !ok {
			continue
		}
		out = append(out, meter.ContainerStats{Identity: id, Run: u.ID, CgroupStats: meter.CgroupStats{
			CPUUserUsec: u.CPUUserUsec, CPUSystemUsec: u.CPUSystemUsec,
			MemoryBytes: u.MemoryBytes, MemoryPeakBytes: u.MemoryPeakBytes, HasMemory: u.Memory,
		}})
	}
	return out, nil
}

// modelSpend reads the model API's spend: none with --llm-addr off, unknown (false) until
// the model API has started.
func (u *usageComponent) modelSpend() (meter.ModelSpend, bool) {
	if u.s.cfg.LLMAddr == Off {
		return meter.ModelSpend{}, true
	}
	p := u.s.llm.proxyIfStarted()
	if p == nil {
		return meter.ModelSpend{}, false
	}
	st := p.Spend()
	return meter.ModelSpend{UsedNano: st.UsedNano, HeldNano: st.HeldNano, UsedTokens: st.UsedTokens}, true
}

// handler serves the meter's last record as JSON (admin GET /v1/usage/compute), with each
// identity's last record under "identities".
func (u *usageComponent) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		m := u.meter()
		if m == nil {
			http.Error(w, "the usage meter is not running", http.StatusServiceUnavailable)
			return
		}
		r := m.Current()
		_, pending := m.Status()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			meter.Record
			Pending    string         `json:"pending,omitempty"`
			Identities []meter.Record `json:"identities,omitempty"`
		}{r, pending, m.Identities()})
	})
}

// close stops the sampling and writes the final record.
func (u *usageComponent) close(context.Context) error {
	u.closeOnce.Do(func() {
		if u.cancel != nil {
			u.cancel()
			<-u.done
		}
		if m := u.meter(); m != nil {
			if err := m.Close(); err != nil {
				u.s.log.WithError(err).Warn("usage meter: final record")
			}
		}
	})
	return nil
}
