package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// FlagSet wraps flag.FlagSet with the two habits every airlock subcommand shares: flags may
// come before or after positional arguments, and (for commands that opt in) every flag can be
// set from an AIRLOCK_* environment variable of the same name.
type FlagSet struct {
	*flag.FlagSet
	usageLine string
	long      string
}

// NewFlagSet returns the flag set of subcommand name: usageLine and long are printed by --help
// above the flags.
func NewFlagSet(name, usageLine, long string, stderr io.Writer) *FlagSet {
	fs := &FlagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), usageLine: usageLine, long: long}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s\n\n%s\n", fs.usageLine, strings.TrimSpace(fs.long))
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(w, "\nFlags:\n")
			fs.printFlags(w)
		}
	}
	return fs
}

// envName is the environment variable a flag reads: --proxy-addr ← AIRLOCK_PROXY_ADDR.
func envName(flagName string) string {
	return "AIRLOCK_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ParseArgs parses args, allowing flags after positionals, and returns the positionals. With
// fromEnv, a flag not given on the command line takes its AIRLOCK_* variable when set. --help
// prints usage to stdout and returns ErrHelp.
func (fs *FlagSet) ParseArgs(args []string, stdout io.Writer, fromEnv bool) ([]string, error) {
	var positional []string
	for {
		if err := fs.parseOnce(args, stdout); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			positional = append(positional, args[1:]...)
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	if fromEnv {
		if err := fs.applyEnv(); err != nil {
			return nil, err
		}
	}
	return positional, nil
}

// parseOnce is flag.FlagSet.Parse with the usage printed once: to stdout for --help, to
// stderr after the error line for a bad flag. (The flag package would print it itself, to
// the set's output, before parse could say where it belongs.)
func (fs *FlagSet) parseOnce(args []string, stdout io.Writer) error {
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return ErrHelp
	default:
		fs.Usage()
		return ErrUsage
	}
}

// applyEnv sets every flag that was not given explicitly from its environment variable.
func (fs *FlagSet) applyEnv() error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = Failf("%s=%q: %v", envName(f.Name), v, serr)
			}
		}
	})
	return err
}

// DefaultStateDir is where state lives when --state-dir is not given: /var/lib/airlock as
// root, else $XDG_STATE_HOME/airlock (default ~/.local/state/airlock).
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/airlock"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "airlock")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "airlock")
	}
	return filepath.Join(os.TempDir(), "airlock-state")
}

// printFlags lists the flags GNU-style (--name), as docs/ and the examples write them, with
// their default when it is not the zero value.
func (fs *FlagSet) printFlags(w io.Writer) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintf(w, "%s\n      %s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// ParseHead parses the flags before the first positional argument (fs.Args() holds the rest,
// untouched: a command line to run) and then the AIRLOCK_* variables of the flags not given.
func (fs *FlagSet) ParseHead(args []string, stdout io.Writer) error {
	if err := fs.parseOnce(args, stdout); err != nil {
		return err
	}
	return fs.applyEnv()
}
