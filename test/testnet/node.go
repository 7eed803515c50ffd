package testnet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NodeModules returns a node_modules directory holding the pinned npm packages pkgs (each
// "name@version"), installing them from the npm registry the first time into the module's
// .cache/node-sdk (shared by worktrees, never committed). It skips the test when node or npm
// is missing, and fails it instead under AIRLOCK_PRIVILEGED_TESTS=1 (CI), so CI never passes
// without the Node clients having run. Concurrent test processes may race to install: the
// first complete copy wins.
func NodeModules(t testing.TB, pkgs ...string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("AIRLOCK_PRIVILEGED_TESTS") == "1" {
				t.Fatalf("%s is not installed: the Node client tests need it (AIRLOCK_PRIVILEGED_TESTS=1 turns this skip into a failure)", tool)
			}
			t.Skipf("%s is not installed: the Node client tests need it", tool)
		}
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	key := strings.NewReplacer("@", "", "/", "-").Replace(strings.Join(pkgs, "_"))
	root := filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), ".cache", "node-sdk", key)
	mods := filepath.Join(root, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, ".airlock-complete")); err == nil {
		return mods
	}
	if err := installNodeModules(root, pkgs); err != nil {
		if _, serr := os.Stat(filepath.Join(mods, ".airlock-complete")); serr != nil {
			t.Fatal(err)
		}
	}
	return mods
}

// installNodeModules runs npm install of pkgs in a fresh directory beside root, marks it
// complete and renames it to root (which fails when another process got there first).
func installNodeModules(root string, pkgs []string) error {
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(root), "install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private":true}`), 0o644); err != nil {
		return err
	}
	cmd := exec.Command("npm", append([]string{"install", "--no-audit", "--no-fund", "--ignore-scripts"}, pkgs...)...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return &installError{pkgs: pkgs, err: err, out: out}
	}
	if err := os.WriteFile(filepath.Join(tmp, "node_modules", ".airlock-complete"), nil, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, root)
}

// installError is a failed npm install with its output.
type installError struct {
	pkgs []string
	err  error
	out  []byte
}

func (e *installError) Error() string {
	return "npm install " + strings.Join(e.pkgs, " ") + ": " + e.err.Error() + "\n" + string(e.out)
}
