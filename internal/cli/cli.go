// Package cli is what airlock's two mains share: the command table and its dispatch, the
// flag set every subcommand parses with (flags after positionals, AIRLOCK_* environment
// variables), the exit-code error, the default state directory, the version, and the flags of
// the Kubernetes sandbox backend (which airlock parses and airlock-kube serves).
//
// It holds no business logic and links nothing of Kubernetes: cmd/airlock (the sidecar build)
// imports it, and test/depcheck holds that cmd/airlock links no k8s.io package. Only the mains
// (cmd/airlock, cmd/airlock-kube) may import it.
package cli

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// ExitError carries an exit code through the command tree; Main prints its message (if any)
// on one line to stderr.
type ExitError struct {
	// Code is the process exit code.
	Code int
	// Msg is printed after "PROG: "; empty prints nothing.
	Msg string
}

func (e *ExitError) Error() string { return e.Msg }

// ErrUsage means usage was already printed; the exit code is 2.
var ErrUsage = &ExitError{Code: 2}

// ErrHelp means --help was printed; the command exits 0.
var ErrHelp = &ExitError{Code: 0}

// Failf returns an exit-1 error with a formatted one-line message.
func Failf(format string, a ...any) error {
	return &ExitError{Code: 1, Msg: fmt.Sprintf(format, a...)}
}

// OneLineErr is err's message with its whitespace (newlines included) folded to single spaces.
func OneLineErr(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// RunFunc runs a (sub)command with its arguments.
type RunFunc func(args []string, stdout, stderr io.Writer) error

// Command is one subcommand of a binary.
type Command struct {
	Name    string
	Summary string
	Run     RunFunc
}

// Program is one binary's command table.
type Program struct {
	// Name is the binary's name, printed before every error line ("airlock: ...").
	Name string
	// Usage is the text before the command list; the list and a closing line follow it.
	Usage string
	// Commands are the subcommands, in the order usage lists them.
	Commands []Command
}

// PrintUsage writes the program's usage with its command list.
func (p *Program) PrintUsage(w io.Writer) {
	fmt.Fprint(w, p.Usage)
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range p.Commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\nRun \"%s <command> --help\" for a command's flags.\n", p.Name)
}

// Main dispatches args (without the program name) to a subcommand and returns the process
// exit code.
func (p *Program) Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		p.PrintUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		p.PrintUsage(stdout)
		return 0
	}
	for _, c := range p.Commands {
		if c.Name == args[0] {
			return p.ExitCode(c.Run(args[1:], stdout, stderr), stderr)
		}
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n", p.Name, args[0])
	p.PrintUsage(stderr)
	return 2
}

// ExitCode prints err (if it has a message) and maps it to an exit code.
func (p *Program) ExitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", p.Name, ee.Msg)
		}
		return ee.Code
	}
	fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
	return 1
}

// Dispatch runs the subcommand of a command group ("airlock policy check ...") named by
// args[0], or prints the group's usage.
func Dispatch(group, usage string, subs map[string]RunFunc, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ErrUsage
	}
	if run, ok := subs[args[0]]; ok {
		return run(args[1:], stdout, stderr)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "airlock %s: unknown subcommand %q\n", group, args[0])
	fmt.Fprint(stderr, usage)
	return ErrUsage
}

// Version is set at build time with -ldflags "-X github.com/airlock-dev/airlock/internal/cli.Version=...";
// when empty, VersionString reports the module version or VCS revision the Go toolchain
// recorded.
var Version = ""

// VersionString is the version both binaries print.
func VersionString() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	return v
}

// VersionCmd returns the version command of the binary named prog.
func VersionCmd(prog string) RunFunc {
	return func(args []string, stdout, stderr io.Writer) error {
		fs := NewFlagSet("version", prog+" version", "Print "+prog+"'s version.", stderr)
		if _, err := fs.ParseArgs(args, stdout, false); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s\n", prog, VersionString())
		return nil
	}
}
