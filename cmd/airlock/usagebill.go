package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/meter"
	"github.com/airlock-dev/airlock/sandbox"
)

// Bill is one row of the per-sandbox bill `airlock usage` prints: a usage ledger's last
// record of a sandbox (and identity), and where it stands.
type Bill struct {
	meter.Record
	// State is "running", "frozen" (a cap holds it), "stopped" (its sidecar's last record)
	// or "deleted" (from the state directory's usage archive).
	State string `json:"state"`
	// CPUSeconds and TotalUSD are derived from the record, for readers of the JSON.
	CPUSeconds float64 `json:"cpu_seconds"`
	TotalUSD   float64 `json:"total_usd"`
}

// bills reads every usage ledger of the state directory: its own sidecar's, those of the
// sandboxes it holds, and the archive of deleted sandboxes.
func bills(stateDir string) ([]Bill, error) {
	var out []Bill
	var errs []error
	add := func(path, deleted string) {
		recs, err := meter.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
		}
		for _, r := range recs {
			b := Bill{Record: r, State: "running", CPUSeconds: r.CPUSeconds(), TotalUSD: r.TotalUSD()}
			switch {
			case deleted != "":
				b.State = deleted
			case r.Frozen != "":
				b.State = "frozen"
			case r.Kind == meter.KindFinal:
				b.State = "stopped"
			}
			out = append(out, b)
		}
	}
	add(filepath.Join(stateDir, meter.LedgerFile), "")
	dirs, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*", "sidecar", meter.LedgerFile))
	for _, p := range dirs {
		add(p, "")
	}
	add(filepath.Join(stateDir, meter.ArchiveFile), "deleted")
	return out, errors.Join(errs...)
}

// printBills prints the per-sandbox bill as a table.
func printBills(w io.Writer, bs []Bill) {
	if len(bs) == 0 {
		fmt.Fprintln(w, "\nno sandbox usage recorded (no usage ledger in the state directory)")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SANDBOX\tSTATE\tCPU USER s\tCPU SYS s\tMEM PEAK MiB\tGiB-HOURS\tSENT\tRECEIVED\tCONNS\tCOMPUTE USD\tMODEL USD\tTOTAL USD\t")
	for _, b := range bs {
		name := b.Sandbox
		// An identity's record has no network or model figures (package meter, identity.go).
		sent, recv, conns, model := fmt.Sprint(b.TxBytes), fmt.Sprint(b.RxBytes), fmt.Sprint(b.Connections), fmt.Sprintf("%.6f", b.ModelUSD)
		if b.Identity != "" {
			name += "/" + b.Identity
			sent, recv, conns, model = "-", "-", "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%.1f\t%.6f\t%s\t%s\t%s\t%.6f\t%s\t%.6f\t\n", name, b.State,
			float64(b.CPUUserUsec)/1e6, float64(b.CPUSystemUsec)/1e6, float64(b.MemoryPeakBytes)/(1<<20),
			b.MemoryGiBHours, sent, recv, conns, b.ComputeUSD, model, b.TotalUSD)
	}
	tw.Flush()
	for _, b := range bs {
		if b.Frozen != "" && b.Identity == "" {
			fmt.Fprintf(w, "%s: frozen: %s\n", b.Sandbox, b.Frozen)
		}
	}
}

// archiveUsage is the sandbox manager's Archive: it appends the sandbox's last usage record
// (its sidecar's final one) to the state directory's usage archive.
func archiveUsage(stateRoot string) func(st *sandbox.State) error {
	return func(st *sandbox.State) error {
		recs, err := meter.ReadFile(filepath.Join(st.SidecarStateDir(), meter.LedgerFile))
		if err != nil {
			return err
		}
		var errs []error
		for _, r := range recs {
			errs = append(errs, meter.Archive(filepath.Join(stateRoot, meter.ArchiveFile), r))
		}
		return errors.Join(errs...)
	}
}

const sandboxThawLong = `
Thaw a sandbox that a cap of spec.usage.caps froze: the sidecar lifts the freeze at its next
sample (within spec.usage.interval) and leaves the caps unchecked until the next policy
reload, which checks them again (raising the cap in the policy and reloading is the other
way to thaw). The thaw is audited (kind usage, reason usage_thawed). Waits up to --timeout
for the sidecar to confirm.`

func sandboxThaw(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox thaw", "airlock sandbox thaw [--state-dir DIR] [--timeout D] NAME", sandboxThawLong, stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the sidecar to thaw the sandbox")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		fs.Usage()
		return cli.ErrUsage
	}
	m, err := manager(*stateDir, nil)
	if err != nil {
		return err
	}
	st, err := m.Store.Load(rest[0])
	if err != nil {
		return cli.Failf("sandbox thaw: %v", err)
	}
	ledger := filepath.Join(st.SidecarStateDir(), meter.LedgerFile)
	if !frozen(ledger) {
		fmt.Fprintf(stdout, "sandbox %s is not frozen\n", st.Name)
		return nil
	}
	if err := os.WriteFile(filepath.Join(st.SidecarStateDir(), meter.ThawFile), []byte("thaw\n"), 0o600); err != nil {
		return cli.Failf("sandbox thaw: %v", err)
	}
	for deadline := time.Now().Add(*timeout); frozen(ledger); {
		if time.Now().After(deadline) {
			return cli.Failf("sandbox thaw: %s is still frozen after %s: is its sidecar running (airlock sandbox list)?", st.Name, *timeout)
		}
		time.Sleep(100 * time.Millisecond) // polls the ledger the sidecar writes
	}
	fmt.Fprintf(stdout, "sandbox %s thawed\n", st.Name)
	return nil
}

// frozen reports whether the ledger's last record says a cap holds the sandbox frozen.
func frozen(ledger string) bool {
	recs, _ := meter.ReadFile(ledger)
	for _, r := range recs {
		if r.Frozen != "" {
			return true
		}
	}
	return false
}

// fillUsage adds the usage ledger's figures to each status of `sandbox list`: the sandbox's,
// and each identity's CPU and memory peak.
func fillUsage(ss []sandbox.Status) {
	for i := range ss {
		recs, _ := meter.ReadFile(filepath.Join(ss[i].SidecarDir, meter.LedgerFile))
		for _, r := range recs {
			if r.Identity != "" {
				for j := range ss[i].Identities {
					if ss[i].Identities[j].Name == r.Identity {
						ss[i].Identities[j].CPUSeconds, ss[i].Identities[j].MemoryPeakBytes = r.CPUSeconds(), r.MemoryPeakBytes
					}
				}
				continue
			}
			ss[i].CPUSeconds, ss[i].MemoryPeakBytes, ss[i].MemoryGiBHours = r.CPUSeconds(), r.MemoryPeakBytes, r.MemoryGiBHours
			ss[i].RxBytes, ss[i].ComputeUSD, ss[i].Frozen = r.RxBytes, r.ComputeUSD, r.Frozen
		}
	}
}
