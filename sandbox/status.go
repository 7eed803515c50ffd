package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Health of a sandbox's sidecar.
const (
	HealthOK      = "ok"      // /readyz answers 200
	HealthDown    = "down"    // no sidecar answers (restarting, or its supervisor is gone)
	HealthUnknown = "unknown" // not ready yet, or being deleted
)

// Status is one row of `sandbox list`: the state plus what the sidecar reports now.
type Status struct {
	Name        string    `json:"name"`
	Backend     string    `json:"backend"`
	Phase       Phase     `json:"phase"`
	Created     time.Time `json:"created"`
	AgeSeconds  int64     `json:"age_seconds"`
	Policy      string    `json:"policy"`
	Environment string    `json:"environment"`
	Health      string    `json:"health"`
	Kernel      bool      `json:"kernel"`
	Bytes       uint64    `json:"bytes"`         // bytes the sandbox sent (kernel counter; proxy bytes without it)
	Denies      uint64    `json:"denies"`        // kernel, proxy and DNS denials
	LLMSpendUSD float64   `json:"llm_spend_usd"` // model API cost from the sandbox's usage ledger
	Netns       string    `json:"netns"`
	HostVeth    string    `json:"host_veth"`
	HostAddr    string    `json:"host_addr"`
	SandboxAddr string    `json:"sandbox_addr"`
	Cgroup      string    `json:"cgroup"`
	StateDir    string    `json:"state_dir"`
	// SidecarDir is the sidecar's --state-dir (grants, the approvals socket).
	SidecarDir    string `json:"sidecar_state_dir"`
	EnvFile       string `json:"env_file"`
	CABundle      string `json:"ca_bundle"`
	LogFile       string `json:"log_file"`
	AuditLog      string `json:"audit_log"`
	AdminAddr     string `json:"admin_addr"`
	SupervisorPid int    `json:"supervisor_pid"`
	SidecarPid    int    `json:"sidecar_pid"`
	// OpenAsks counts the sidecar's asks to the operator still waiting for an answer
	// (spec.approval); cmd/airlock fills it from the sidecar's approvals socket.
	OpenAsks int `json:"open_asks"`
	// DiskBytes is the size of the sandbox's disk (--disk; 0: none) and DiskUsedBytes how
	// much of it is in use, the filesystem's own metadata included (-1: not mounted).
	DiskBytes     int64 `json:"disk_bytes,omitempty"`
	DiskUsedBytes int64 `json:"disk_used_bytes,omitempty"`
	// The usage meter's figures from the sidecar's usage ledger (cmd/airlock fills them):
	// CPU-seconds (user plus system), memory peak and GiB-hours, bytes received (Bytes is
	// what it sent), compute spend at spec.usage.prices, and the message of the cap that
	// froze the sandbox ("" when it runs).
	CPUSeconds      float64 `json:"cpu_seconds"`
	MemoryPeakBytes uint64  `json:"memory_peak_bytes"`
	MemoryGiBHours  float64 `json:"memory_gib_hours"`
	RxBytes         uint64  `json:"rx_bytes"`
	ComputeUSD      float64 `json:"compute_usd"`
	Frozen          string  `json:"frozen,omitempty"`
	// Identities are the identities `exec --as` has run in the sandbox, by uid, with their
	// model API spend from the sidecar's usage ledger.
	Identities []IdentityStatus `json:"identities,omitempty"`
}

// IdentityStatus is one identity of a sandbox's Status.
type IdentityStatus struct {
	Name        string  `json:"name"`
	UID         int     `json:"uid"`
	LLMSpendUSD float64 `json:"llm_spend_usd"`
	// CPUSeconds and MemoryPeakBytes are the usage meter's figures for the identity's own
	// cgroup, from the sidecar's usage ledger (cmd/airlock fills them).
	CPUSeconds      float64 `json:"cpu_seconds"`
	MemoryPeakBytes uint64  `json:"memory_peak_bytes"`
	// ProxyBytes are the bytes the proxy relayed for the identity (both ways, since the
	// sidecar started), and Denies the proxy's and DNS filter's refusals of its requests and
	// queries, from the sidecar's metrics (label identity). An identity reaches the network
	// only through the sidecar, but for its own protocol tcp rules, which the proxy does not
	// see; the kernel's counters (Status.Bytes) are the whole sandbox's.
	ProxyBytes uint64 `json:"proxy_bytes"`
	Denies     uint64 `json:"denies"`
}

// identityStatuses lists the identities of uids (by uid) with their spend.
func identityStatuses(uids map[string]int, spend map[string]float64) []IdentityStatus {
	var out []IdentityStatus
	for name, uid := range uids {
		out = append(out, IdentityStatus{Name: name, UID: uid, LLMSpendUSD: spend[name]})
	}
	slices.SortFunc(out, func(a, b IdentityStatus) int { return cmp.Compare(a.UID, b.UID) })
	return out
}

// Statuses reports every sandbox of the store, asking the sidecars concurrently (each bounded
// by timeout).
func (m *Manager) Statuses(ctx context.Context, timeout time.Duration) ([]Status, error) {
	states, err := m.Store.List()
	out := make([]Status, len(states))
	var wg sync.WaitGroup
	for i, st := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = m.status(ctx, st, timeout)
		}()
	}
	wg.Wait()
	return out, err
}

func (m *Manager) status(ctx context.Context, st *State, timeout time.Duration) Status {
	s := Status{
		Name: st.Name, Backend: st.Backend, Phase: st.Phase, Created: st.Created,
		AgeSeconds: int64(time.Since(st.Created).Seconds()), Policy: st.Policy, Environment: st.Environment,
		Health: HealthUnknown, Kernel: st.Kernel, Netns: st.Netns, HostVeth: st.HostVeth, HostAddr: st.HostAddr,
		SandboxAddr: st.SandboxAddr, Cgroup: st.Cgroup, StateDir: st.Dir, SidecarDir: st.sidecarStateDir(), EnvFile: st.EnvFile(),
		CABundle: st.CABundle(), LogFile: st.LogFile(), AuditLog: st.AuditLog(), AdminAddr: st.AdminAddr,
		SidecarPid: m.sidecarPid(st),
	}
	if st.Container != nil && st.Container.Disk != nil {
		s.DiskBytes, s.DiskUsedBytes = st.Container.Disk.Size, diskUsage(st.Container.Disk)
	}
	s.Identities = identityStatuses(st.IdentityUIDs, nil)
	if m.ops().Alive(st.SupervisorPid, st.SupervisorTick) {
		s.SupervisorPid = st.SupervisorPid
	}
	if st.Phase != PhaseReady || st.Network == NetworkNone {
		return s
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+st.AdminAddr+path, nil)
		if err != nil {
			return nil, err
		}
		return client.Do(req)
	}
	resp, err := get("/readyz")
	if err != nil {
		s.Health = HealthDown
		return s
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.Health = HealthDown
		return s
	}
	s.Health = HealthOK
	var fams map[string]*dto.MetricFamily
	if resp, err = get("/metrics"); err == nil {
		defer resp.Body.Close()
		if fams, err = parseMetrics(resp.Body); err == nil {
			s.Bytes = uint64(sum(fams, "airlock_kernel_egress_bytes_total", nil))
			if !st.Kernel {
				s.Bytes = uint64(sum(fams, "airlock_proxy_bytes_total", nil))
			}
			s.Denies = uint64(sum(fams, "airlock_kernel_denies_total", nil) +
				sum(fams, "airlock_proxy_requests_total", map[string]string{"decision": "deny"}) +
				sum(fams, "airlock_dns_queries_total", map[string]string{"decision": "deny"}))
			s.LLMSpendUSD = sum(fams, "airlock_llm_cost_usd_total", nil)
		}
	}
	// The ledger's total outlives sidecar restarts; the metric above counts since the start.
	if resp, err = get("/v1/usage"); err == nil {
		defer resp.Body.Close()
		type total struct {
			CostUSD float64 `json:"cost_usd"`
		}
		var u struct {
			Total      total `json:"total"`
			Identities []struct {
				Identity string `json:"identity"`
				Total    total  `json:"total"`
			} `json:"identities"`
		}
		if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&u) == nil {
			s.LLMSpendUSD = u.Total.CostUSD
			spend := map[string]float64{}
			for _, it := range u.Identities {
				spend[it.Identity] = it.Total.CostUSD
			}
			s.Identities = identityStatuses(st.IdentityUIDs, spend)
		}
	}
	identityNetwork(s.Identities, fams)
	return s
}

// identityNetwork fills each identity's proxy bytes and denials from the sidecar's metrics
// (nil: none read).
func identityNetwork(ids []IdentityStatus, fams map[string]*dto.MetricFamily) {
	for i := range ids {
		of := map[string]string{"identity": ids[i].Name}
		ids[i].ProxyBytes = uint64(sum(fams, "airlock_proxy_bytes_total", of))
		deny := map[string]string{"identity": ids[i].Name, "decision": "deny"}
		ids[i].Denies = uint64(sum(fams, "airlock_proxy_requests_total", deny) + sum(fams, "airlock_dns_queries_total", deny))
	}
}

func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

// sum adds the samples (counters, gauges, untyped) of the family whose labels include match.
func sum(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	var total float64
next:
	for _, m := range fams[name].GetMetric() {
		for k, v := range match {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return total
}
