package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/sandbox"
)

const approvalsUsage = `Usage: airlock approvals <command> [flags] [args]

Answer the asks of a running sidecar whose policy has spec.approval: requests to hosts no
rule names are held while the operator is asked (docs/policy.md, "Approvals").

Commands:
  list          the open asks and the live grants (--json)
  grant ID      grant an ask: --once (the default: one request or tunnel), --for DURATION
                (at most spec.approval.maxGrant), or --sandbox (the sandbox's life, with
                spec.approval.sandboxGrants)
  deny ID       deny an ask; retries are refused at once until askTTL ends
  revoke ID     end a grant at once (its addresses leave the kernel allow map)

The sidecar is found by --state-dir (env AIRLOCK_STATE_DIR), as airlock run takes it: its
operator socket (approvals.sock, mode 0600) answers only root and the sidecar's user, and the
audit event names the approver by uid. For a local sandbox: airlock sandbox approvals NAME ...
Run "airlock approvals <command> --help".
`

func approvalsCmd(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("approvals", approvalsUsage, approvalsSubs(nil), args, stdout, stderr)
}

// approvalsSubs are the approvals commands; with stateDir set (a sandbox's sidecar) the
// --state-dir flag is not read.
func approvalsSubs(stateDir *string) map[string]cli.RunFunc {
	return map[string]cli.RunFunc{
		"list":   func(a []string, o, e io.Writer) error { return approvalsList(stateDir, a, o, e) },
		"grant":  func(a []string, o, e io.Writer) error { return approvalsGrant(stateDir, a, o, e) },
		"deny":   func(a []string, o, e io.Writer) error { return approvalsAnswer("deny", stateDir, a, o, e) },
		"revoke": func(a []string, o, e io.Writer) error { return approvalsAnswer("revoke", stateDir, a, o, e) },
	}
}

// approvalsFlags makes the flag set of one command, with --state-dir unless fixed.
func approvalsFlags(name, usage, long string, fixed *string, stderr io.Writer) (*cli.FlagSet, *string) {
	fs := cli.NewFlagSet("approvals "+name, usage, long, stderr)
	if fixed != nil {
		return fs, fixed
	}
	return fs, fs.String("state-dir", cli.DefaultStateDir(), "the sidecar's state directory (env AIRLOCK_STATE_DIR)")
}

func approvalsList(fixed *string, args []string, stdout, stderr io.Writer) error {
	fs, dir := approvalsFlags("list", "airlock approvals list [--state-dir DIR] [--json]",
		"List the open asks (pending, and denied ones until askTTL ends) and the live grants.", fixed, stderr)
	asJSON := fs.Bool("json", false, `print {"asks": [...], "grants": [...]}`)
	if err := noArgs(fs, args, stdout); err != nil {
		return err
	}
	asks, grants, err := approval.NewClient(*dir).List(context.Background())
	if err != nil {
		return cli.Failf("%v", err)
	}
	if *asJSON {
		return cli.WriteJSON(stdout, map[string]any{"asks": asks, "grants": grants})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ASK\tSTATUS\tDESTINATION\tVIA\tREQUEST\tMISSES\tAGE\tEXPIRES IN\tIDENTITY")
	now := time.Now()
	for _, a := range asks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %s\t%d\t%s\t%s\t%s\n", a.ID, a.Status, a.Destination(), a.Via, a.Method, a.Path,
			a.Misses, cli.Age(now.Sub(a.Created)), cli.Age(a.Expires.Sub(now)), identityOr(a.Identity))
	}
	fmt.Fprintln(tw, "\nGRANT\tSCOPE\tHOST\tPORTS\tAPPROVER\tUNTIL\t\t\tIDENTITY")
	for _, g := range grants {
		until := "-"
		if g.Scope == approval.ScopeDuration {
			until = g.Until.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t\t\t%s\n", g.ID, g.Scope, g.Host, g.Ports, g.Approver, until, identityOr(g.Identity))
	}
	return tw.Flush()
}

func approvalsGrant(fixed *string, args []string, stdout, stderr io.Writer) error {
	fs, dir := approvalsFlags("grant", "airlock approvals grant [--state-dir DIR] [--once | --for DURATION | --sandbox] ID",
		"Grant the ask ID: the held request (and its retries) go on as if a rule named the host on the port asked (80 and 443 for a DNS ask).", fixed, stderr)
	once := fs.Bool("once", false, "serve one request or tunnel (the default)")
	dur := fs.Duration("for", 0, "serve for this long (at most spec.approval.maxGrant), e.g. 30m")
	life := fs.Bool("sandbox", false, "serve for the sandbox's life (needs spec.approval.sandboxGrants)")
	id, err := oneArg(fs, args, stdout)
	if err != nil {
		return err
	}
	scope, n := approval.ScopeOnce, 0
	for _, set := range []bool{*once, *dur != 0, *life} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return cli.Failf("approvals grant: give one of --once, --for and --sandbox")
	case *dur != 0:
		scope = approval.ScopeDuration
	case *life:
		scope = approval.ScopeSandbox
	}
	g, err := approval.NewClient(*dir).Grant(context.Background(), id, scope, *dur)
	if err != nil {
		return cli.Failf("approvals grant %s: %v", id, err)
	}
	fmt.Fprintf(stdout, "granted %s: %s ports %v, scope %s, approver %s\n", g.ID, g.Host, g.Ports, g.Scope, g.Approver)
	return nil
}

func approvalsAnswer(verb string, fixed *string, args []string, stdout, stderr io.Writer) error {
	fs, dir := approvalsFlags(verb, "airlock approvals "+verb+" [--state-dir DIR] ID", map[string]string{
		"deny":   "Deny the ask ID: the held request gets 403 approval_denied, and so do retries until askTTL ends.",
		"revoke": "End the grant ID at once: its addresses leave the kernel allow map, and the next request is a miss again.",
	}[verb], fixed, stderr)
	id, err := oneArg(fs, args, stdout)
	if err != nil {
		return err
	}
	c := approval.NewClient(*dir)
	if verb == "deny" {
		err = c.Deny(context.Background(), id)
	} else {
		err = c.Revoke(context.Background(), id)
	}
	if err != nil {
		return cli.Failf("approvals %s %s: %v", verb, id, err)
	}
	fmt.Fprintf(stdout, "%s %s\n", map[string]string{"deny": "denied", "revoke": "revoked"}[verb], id)
	return nil
}

func noArgs(fs *cli.FlagSet, args []string, stdout io.Writer) error {
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	return nil
}

func oneArg(fs *cli.FlagSet, args []string, stdout io.Writer) (string, error) {
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return "", err
	}
	if len(rest) != 1 {
		fs.Usage()
		return "", cli.Failf("give one ask or grant ID (airlock approvals list shows them)")
	}
	return rest[0], nil
}

// sandboxApprovals is "airlock sandbox approvals NAME <command> ...": the approvals commands
// on a local sandbox's sidecar.
func sandboxApprovals(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox approvals", "airlock sandbox approvals [--state-dir DIR] NAME list|grant|deny|revoke [flags] [ID]",
		"Answer the asks of a local sandbox's sidecar (see airlock approvals --help).", stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory")
	if err := fs.ParseHead(args, stdout); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) < 1 {
		fs.Usage()
		return cli.Failf("sandbox approvals: give the sandbox NAME and a command")
	}
	store, err := sandbox.OpenStore(*stateDir)
	if err != nil {
		return cli.Failf("%v", err)
	}
	st, err := store.Load(rest[0])
	if err != nil {
		return cli.Failf("sandbox approvals: %v", err)
	}
	dir := st.SidecarStateDir()
	return cli.Dispatch("sandbox approvals "+rest[0], approvalsUsage, approvalsSubs(&dir), rest[1:], stdout, stderr)
}

// openAsks counts the pending asks of a sandbox's sidecar; 0 when it cannot be asked.
func openAsks(sidecarStateDir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	asks, _, err := approval.NewClient(sidecarStateDir).List(ctx)
	if err != nil {
		return 0
	}
	n := 0
	for _, a := range asks {
		if a.Status == approval.StatusPending {
			n++
		}
	}
	return n
}

// identityOr is an ask's or grant's identity for the table: "-" for the sandbox's own.
func identityOr(name string) string {
	if name == "" {
		return "-"
	}
	return name
}
