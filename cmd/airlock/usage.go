package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/llmproxy"
	"github.com/airlock-dev/airlock/policy"
)

const usageLong = `
Print the model usage recorded in the state directory's ledger (llm-ledger.jsonl): per model,
requests, input and output tokens and cost, and the total. With --policy, also the budget
(spec.llm.budget) and what is left of it. The ledger is read, never changed, so this is safe
while the sidecar runs; reservations of calls still in flight are listed as pending.

When the policy has identities (spec.identities), each identity's calls are totalled below
the models (they count in the sandbox's total too). --identity NAME reports only NAME's calls,
and with --policy its own budget (spec.identities.NAME.llm.budget).

Below it, the bill of each sandbox from the usage meter's ledgers (spec.usage; see
docs/sandboxes.md "Usage and caps"): the state directory's own (usage-ledger.jsonl), those
of the sandboxes it holds (sandboxes/NAME/sidecar/) and the archive of deleted ones
(usage-archive.jsonl): CPU-seconds user and system, memory peak and GiB-hours, bytes sent
and received, connections, compute spend at spec.usage.prices, model spend, and the total.
Each identity of a local sandbox has a row of its own (SANDBOX/IDENTITY) with the CPU and
memory of its cgroup and their compute spend; its network and model columns are "-" (the
kernel counts bytes per sandbox; its model calls are in the table above). The sandbox's row
counts every identity's processes too. --identity NAME keeps only NAME's rows.

A ledger line that fails its checksum (other than a torn last line) is an error: the file was
changed and no total can be trusted.`

func usageCmd(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("usage", "airlock usage [--state-dir DIR] [--policy FILE] [--json]", usageLong, stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory holding the ledger (env AIRLOCK_STATE_DIR)")
	policyFile := fs.String("policy", "", "policy whose llm.budget to report what is left of (env AIRLOCK_POLICY)")
	asJSON := fs.Bool("json", false, "print the report as JSON (the admin /v1/usage format, with the sandboxes' bills under \"sandboxes\")")
	identity := fs.String("identity", "", "report only the calls of this identity of spec.identities (and with --policy its own budget)")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	totals, err := llmproxy.ReadLedger(*stateDir)
	if err != nil {
		return cli.Failf("%v", err)
	}
	if *identity != "" {
		totals, _ = totals.Identity(*identity)
	}
	caps, err := usageCaps(*policyFile, *identity)
	if err != nil {
		return err
	}
	var pending llmproxy.BudgetState
	for _, r := range totals.Pending {
		pending.HeldTokens += r.Input + r.Output
		pending.HeldNano += r.CostNano
	}
	rep := llmproxy.Report(totals, caps, pending)
	bs, err := bills(*stateDir)
	if err != nil {
		return cli.Failf("%v", err)
	}
	if *identity != "" {
		bs = slices.DeleteFunc(bs, func(b Bill) bool { return b.Identity != *identity })
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if bs == nil {
			bs = []Bill{}
		}
		return enc.Encode(struct {
			llmproxy.Usage
			Sandboxes []Bill `json:"sandboxes"`
		}{rep, bs})
	}
	printUsage(stdout, rep, len(totals.Pending))
	printBills(stdout, bs)
	return nil
}

// usageCaps returns the budget of the policy in file (none without one): the sandbox's, or
// with identity that identity's own.
func usageCaps(file, identity string) (policy.Budget, error) {
	if file == "" {
		return policy.Budget{}, nil
	}
	pol, err := policy.Load(file)
	if err != nil {
		return policy.Budget{}, loadErr(err)
	}
	if identity == "" {
		return pol.LLM().Budget, nil
	}
	ip, ok := pol.Identity(identity)
	if !ok {
		have := "none"
		if names := pol.IdentityNames(); len(names) > 0 {
			have = strings.Join(names, ", ")
		}
		return policy.Budget{}, cli.Failf("--identity %s: policy %q has no identity %q (spec.identities: %s)", identity, pol.Name(), identity, have)
	}
	return ip.LLM().Budget, nil
}

// printUsage prints the report as a table.
func printUsage(w io.Writer, u llmproxy.Usage, pending int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "MODEL\tPROVIDER\tREQUESTS\tINPUT TOKENS\tOUTPUT TOKENS\tCOST USD\t")
	for _, m := range u.Models {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.6f\t\n", m.Model, m.Provider, m.Requests, m.Input, m.Output, m.CostUSD)
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.6f\t\n", "total", "", u.Total.Requests, u.Total.Input, u.Total.Output, u.Total.CostUSD)
	tw.Flush()
	if len(u.Identities) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "IDENTITY\tREQUESTS\tINPUT TOKENS\tOUTPUT TOKENS\tCOST USD\t")
		for _, it := range u.Identities {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.6f\t\n", it.Identity, it.Total.Requests, it.Total.Input, it.Total.Output, it.Total.CostUSD)
		}
		tw.Flush()
	}
	var b []string
	if u.Budget.Tokens != nil {
		b = append(b, fmt.Sprintf("tokens: %d of %d left", *u.Budget.TokensRemaining, *u.Budget.Tokens))
	}
	if u.Budget.USD != nil {
		b = append(b, fmt.Sprintf("usd: $%.6f of $%.2f left", *u.Budget.USDRemaining, *u.Budget.USD))
	}
	switch {
	case len(b) > 0:
		fmt.Fprintf(w, "budget: %s\n", strings.Join(b, "; "))
	default:
		fmt.Fprintln(w, "budget: no lifetime cap (pass --policy to show one)")
	}
	if u.Total.Estimated > 0 {
		fmt.Fprintf(w, "%d call(s) charged at their reservation (usage unknown: stream cut or interrupted)\n", u.Total.Estimated)
	}
	if pending > 0 {
		fmt.Fprintf(w, "%d call(s) in flight: %d tokens reserved\n", pending, u.Budget.ReservedTokens)
	}
}
