package meter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// ThawFile is the file, in the sidecar's state directory, by which the operator asks the
// meter to thaw a sandbox a cap froze (`airlock sandbox thaw`); the meter removes it when it
// has done so.
const ThawFile = "usage-thaw"

// gib is 2^30 bytes.
const gib = 1 << 30

// Net are the kernel's per-sandbox counters the meter reads.
type Net struct {
	TxBytes, RxBytes, Connections uint64
}

// ModelSpend is the model API's spend: settled (UsedNano, UsedTokens) and reserved by calls
// in flight (HeldNano), in nano-dollars.
type ModelSpend struct {
	UsedNano, HeldNano, UsedTokens int64
}

// PolicySource supplies the policy in force (policy.Store).
type PolicySource interface {
	Current() *policy.Policy
}

// Config is what a Meter is told. Key, Policy and Ledger are required.
type Config struct {
	// Key names whose figures these are.
	Key Key
	// Cgroup is the sandbox's cgroup; nil means no CPU or memory figures and no freezing
	// (a pod, whose cgroup also holds the sidecar).
	Cgroup *Cgroup
	// Containers reads a pod's running app containers of an identity, each with its cgroup
	// counters (identity.go); nil means none (a local sandbox reads its identities' cgroups
	// below Cgroup instead).
	Containers func() ([]ContainerStats, error)
	// Net reads the kernel's counters; nil means no network figures.
	Net func() (Net, error)
	// Model reads the model API's spend; false means it cannot be read now (the model API
	// has not started yet), and the last record's model spend stands. Nil means none.
	Model func() (ModelSpend, bool)
	// Policy supplies spec.usage, read afresh at every sample.
	Policy PolicySource
	// Ledger is the usage ledger's path (StateDir/usage-ledger.jsonl).
	Ledger string
	// ThawRequest is the operator's thaw request file (StateDir/usage-thaw); "" means none.
	ThawRequest string
	// Audit receives the freeze and thaw events; nil means none.
	Audit audit.Sink
	// Logger receives operational logs; nil discards them.
	Logger logrus.FieldLogger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Meter samples one sandbox's figures, keeps them in the usage ledger and enforces
// spec.usage.caps. New has no side effects; Open restores the ledger; Run samples every
// spec.usage.interval until its context ends; Close writes a final record.
type Meter struct {
	cfg    Config
	ledger *Ledger

	// sampleMu serialises Sample (reads, ledger writes, freezing).
	sampleMu sync.Mutex

	// mu guards the fields below.
	mu  sync.Mutex
	rec Record // the last record: the totals so far
	// have says rec holds a sample (taken, or restored from the ledger).
	have bool
	// pending is the message of a usd cap reached while model calls were in flight: the
	// freeze waits for them (see docs/sandboxes.md).
	pending string
	// pol is the policy of the last sample; a new one clears an operator's waiver.
	pol    *policy.Policy
	closed bool
	// ids is the last record of each identity metered (identity.go), by name.
	ids map[string]Record
}

// New checks cfg and builds a Meter; it opens nothing.
func New(cfg Config) (*Meter, error) {
	switch {
	case cfg.Key.Sandbox == "":
		return nil, errors.New("meter: Config.Key.Sandbox is required")
	case cfg.Policy == nil:
		return nil, errors.New("meter: Config.Policy is required")
	case cfg.Ledger == "":
		return nil, errors.New("meter: Config.Ledger is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		cfg.Logger = l
	}
	return &Meter{cfg: cfg, rec: Record{Key: cfg.Key}}, nil
}

// Open opens the ledger and restores the key's last record: its totals, raw counters and
// freeze carry on across sidecar restarts.
func (m *Meter) Open() error {
	l, last, err := OpenLedger(m.cfg.Ledger)
	if err != nil {
		return err
	}
	m.ledger = l
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range last {
		if r.Key == m.cfg.Key && (!m.have || r.Seq > m.rec.Seq) {
			m.rec, m.have = r, true
		}
		m.restoreIdentity(r)
	}
	return nil
}

// Run samples every spec.usage.interval (read afresh each time) until ctx ends.
func (m *Meter) Run(ctx context.Context) {
	for {
		t := time.NewTimer(m.cfg.Policy.Current().Usage().Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if _, err := m.Sample(KindSample); err != nil {
			m.cfg.Logger.WithError(err).Warn("usage sample failed")
		}
	}
}

// Close takes a final sample (KindFinal) and closes the ledger. It is idempotent.
func (m *Meter) Close() error {
	m.mu.Lock()
	if m.closed || m.ledger == nil {
		m.closed = true
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	_, err := m.Sample(KindFinal)
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return errors.Join(err, m.ledger.Close())
}

// Current returns the last record.
func (m *Meter) Current() Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rec
}

// Sample reads the counters, adds what grew since the last sample to the totals, prices
// them, applies the caps (freezing or thawing) and appends the record to the ledger. kind is
// KindSample or KindFinal; a freeze or thaw writes KindFreeze or KindThaw instead. Then it
// samples each identity's cgroup and appends its record (identity.go). It returns the
// sandbox's record.
func (m *Meter) Sample(kind string) (Record, error) {
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Record{}, errors.New("meter closed")
	}
	m.mu.Unlock()
	now := m.cfg.Now()
	raw, mem, errs := m.read()
	spend, known := m.spend()
	pol := m.cfg.Policy.Current()
	m.mu.Lock()
	rec := accumulate(m.rec, m.have, now, raw, mem)
	if !known { // the last record's model spend stands
		spend.UsedNano, spend.UsedTokens = int64(math.Round(m.rec.ModelUSD*1e9)), m.rec.ModelTokens
	}
	price(&rec, pol.Usage().Prices, spend)
	if pol != m.pol {
		if m.pol != nil {
			rec.Waived = false // a reload checks the caps again
		}
		m.pol = pol
	}
	m.mu.Unlock()
	if k, err := m.applyCaps(&rec, pol, spend); err != nil {
		errs = append(errs, err)
	} else if k != "" {
		kind = k
	}
	rec.Kind = kind
	if err := m.ledger.Append(rec); err != nil {
		errs = append(errs, err)
	}
	m.mu.Lock()
	m.rec, m.have = rec, true
	m.mu.Unlock()
	if kind == KindFreeze || kind == KindThaw {
		kind = KindSample // the sandbox's event; its identities' records are samples
	}
	errs = append(errs, m.sampleIdentities(kind, now, pol)...)
	return rec, errors.Join(errs...)
}

// spend reads the model API's spend; false when it cannot be read now.
func (m *Meter) spend() (ModelSpend, bool) {
	if m.cfg.Model == nil {
		return ModelSpend{}, true
	}
	return m.cfg.Model()
}

// read reads the cgroup and the kernel counters. What cannot be read keeps its last raw
// value, so nothing is added for it.
func (m *Meter) read() (Raw, memReading, []error) {
	m.mu.Lock()
	raw := m.rec.Raw
	m.mu.Unlock()
	var mem memReading
	var errs []error
	if m.cfg.Cgroup != nil {
		s, err := m.cfg.Cgroup.Read()
		switch {
		case err == nil:
			raw.CPUUserUsec, raw.CPUSystemUsec = s.CPUUserUsec, s.CPUSystemUsec
			if s.HasMemory {
				raw.MemoryBytes = s.MemoryBytes
				mem = memReading{ok: true, peak: s.MemoryPeakBytes}
			}
		case !errors.Is(err, ErrNoCgroup):
			errs = append(errs, err)
		}
	}
	if m.cfg.Net != nil {
		n, err := m.cfg.Net()
		if err != nil {
			errs = append(errs, fmt.Errorf("read kernel counters: %w", err))
		} else {
			raw.TxBytes, raw.RxBytes, raw.Connections = n.TxBytes, n.RxBytes, n.Connections
		}
	}
	return raw, mem, errs
}

// memReading is a sample's memory peak, when the cgroup's memory is counted (ok).
type memReading struct {
	ok   bool
	peak uint64
}

// accumulate returns prev with what grew between prev's raw counters and raw added, at now.
// Memory in use is integrated as a trapezoid between the two samples; the peak is the
// cgroup's own. Without a previous sample (have false) the counters count from zero: the
// cgroup's and the kernel's counters start with the sandbox.
func accumulate(prev Record, have bool, now time.Time, raw Raw, mem memReading) Record {
	r := prev
	if !have {
		r.Since = now
	}
	t := &r.Totals
	t.CPUUserUsec += grew(prev.Raw.CPUUserUsec, raw.CPUUserUsec)
	t.CPUSystemUsec += grew(prev.Raw.CPUSystemUsec, raw.CPUSystemUsec)
	t.TxBytes += grew(prev.Raw.TxBytes, raw.TxBytes)
	t.RxBytes += grew(prev.Raw.RxBytes, raw.RxBytes)
	t.Connections += grew(prev.Raw.Connections, raw.Connections)
	if mem.ok {
		t.MemoryPeakBytes = max(t.MemoryPeakBytes, mem.peak, raw.MemoryBytes)
		if have && now.After(prev.Time) {
			avg := (float64(prev.Raw.MemoryBytes) + float64(raw.MemoryBytes)) / 2
			t.MemoryGiBHours += avg / gib * now.Sub(prev.Time).Hours()
		}
	}
	r.Raw, r.Time = raw, now
	return r
}

// grew is how much a counter grew from prev to cur: cur itself when it is lower (the counter
// started again from zero).
func grew(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// price sets the record's compute and model spend.
func price(r *Record, p policy.UsagePrices, spend ModelSpend) {
	r.ComputeUSD = r.CPUSeconds()*p.CPUSecond + r.MemoryGiBHours*p.GiBHour +
		float64(r.TxBytes+r.RxBytes)/gib*p.GiBTransferred
	r.ModelUSD = float64(spend.UsedNano) / 1e9
	r.ModelTokens = spend.UsedTokens
}

// capReached returns the message of the first cap r reaches, or "". held is the model spend
// reserved by calls in flight, which the usd cap counts.
func capReached(c policy.UsageCaps, r Record, held float64) (name, msg string) {
	switch {
	case c.CPUSeconds > 0 && r.CPUSeconds() >= c.CPUSeconds:
		return "cpuSeconds", fmt.Sprintf("spec.usage.caps.cpuSeconds %g reached (%.2f CPU-seconds used)", c.CPUSeconds, r.CPUSeconds())
	case c.EgressBytes > 0 && r.TxBytes+r.RxBytes >= uint64(c.EgressBytes):
		return "egressBytes", fmt.Sprintf("spec.usage.caps.egressBytes %d reached (%d bytes sent and received)", c.EgressBytes, r.TxBytes+r.RxBytes)
	case c.USD > 0 && r.TotalUSD()+held >= c.USD:
		return "usd", fmt.Sprintf("spec.usage.caps.usd $%.2f reached ($%.6f compute and network, $%.6f models, $%.6f reserved by model calls in flight)",
			c.USD, r.ComputeUSD, r.ModelUSD, held)
	}
	return "", ""
}

// applyCaps freezes the sandbox when a cap is reached and thaws it when none is any more (a
// reload raised it) or the operator asked. It returns KindFreeze or KindThaw when it did
// either, else "". A usd cap reached while model calls are in flight freezes only once they
// have ended: a call admitted under its reservation is never cut off by compute accrual.
func (m *Meter) applyCaps(r *Record, pol *policy.Policy, spend ModelSpend) (string, error) {
	wasFrozen := r.Frozen != ""
	if m.operatorThaw() {
		r.Waived = true
	}
	name, msg := capReached(pol.Usage().Caps, *r, float64(spend.HeldNano)/1e9)
	if m.cfg.Cgroup == nil {
		return "", nil // nothing to freeze: the caps are reported, not enforced
	}
	m.setPending("")
	switch {
	case name != "" && !r.Waived && name == "usd" && spend.HeldNano > 0 && !wasFrozen:
		m.setPending(msg + "; the sandbox is frozen once the model calls in flight end")
		return "", nil
	case name != "" && !r.Waived:
		r.Frozen = msg
		if err := m.cfg.Cgroup.Freeze(true); err != nil { // again every sample: it stays frozen
			return "", err
		}
		if wasFrozen {
			return "", nil
		}
		m.event(audit.DecisionDeny, policy.ReasonUsageCap, pol, "sandbox frozen: "+msg)
		return KindFreeze, nil
	case wasFrozen:
		why := "no cap of spec.usage.caps is reached any more (a policy reload raised it)"
		if r.Waived {
			why = "the operator thawed it (airlock sandbox thaw); the caps are checked again at the next policy reload"
		}
		r.Frozen = ""
		if err := m.cfg.Cgroup.Freeze(false); err != nil {
			r.Frozen = msg
			return "", err
		}
		m.event(audit.DecisionAllow, policy.ReasonUsageThawed, pol, "sandbox thawed: "+why)
		return KindThaw, nil
	}
	return "", nil
}

// operatorThaw reports (and consumes) the operator's request to thaw.
func (m *Meter) operatorThaw() bool {
	if m.cfg.ThawRequest == "" {
		return false
	}
	err := os.Remove(m.cfg.ThawRequest)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.cfg.Logger.WithError(err).Warn("cannot remove the usage thaw request")
	}
	return err == nil
}

func (m *Meter) setPending(msg string) {
	m.mu.Lock()
	m.pending = msg
	m.mu.Unlock()
}

// event audits a freeze or a thaw.
func (m *Meter) event(decision string, reason policy.Reason, pol *policy.Policy, detail string) {
	m.cfg.Logger.WithField("sandbox", m.cfg.Key.Sandbox).Warn(detail)
	if m.cfg.Audit == nil {
		return
	}
	m.cfg.Audit.Log(audit.Event{Time: m.cfg.Now(), Kind: audit.KindUsage, Decision: decision,
		Reason: string(reason), Detail: detail, Policy: pol.Name()})
}

// Admit says whether a new model call may start: not while the sandbox is frozen or a cap
// is reached (the usd cap counting the model API's spend now, reservations included). The
// model API calls it before reserving; its error's text is the answer's message.
func (m *Meter) Admit() error {
	spend, _ := m.spend()
	pol := m.cfg.Policy.Current()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rec
	if r.Waived && pol == m.pol {
		return nil
	}
	r.ModelUSD = float64(spend.UsedNano) / 1e9
	if _, msg := capReached(pol.Usage().Caps, r, float64(spend.HeldNano)/1e9); msg != "" {
		return fmt.Errorf("airlock: the sandbox's usage cap is reached: %s; raise spec.usage.caps", msg)
	}
	return nil
}

// Status is the meter's state for `sandbox list` and the admin listener.
func (m *Meter) Status() (frozen, pending string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rec.Frozen, m.pending
}
