package main

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestSystemdReapUnitRuns runs the command line of deploy/systemd/airlock-sandbox-reap.service
// with the unit's environment (the state directory pointed at a temporary one), so the unit
// cannot name a flag or variable airlock does not know.
func TestSystemdReapUnitRuns(t *testing.T) {
	f, err := os.Open("../../deploy/systemd/airlock-sandbox-reap.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var exec []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if kv, ok := strings.CutPrefix(line, "Environment="); ok {
			k, v, _ := strings.Cut(kv, "=")
			if k == "AIRLOCK_STATE_DIR" {
				v = t.TempDir()
			}
			t.Setenv(k, v)
		}
		if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = strings.Fields(cmd)
		}
	}
	if len(exec) < 2 || !strings.HasSuffix(exec[0], "/airlock") {
		t.Fatalf("ExecStart %q: want /…/airlock and a subcommand", exec)
	}
	var stdout, stderr bytes.Buffer
	if code := program.Main(exec[1:], &stdout, &stderr); code != 0 {
		t.Fatalf("airlock %s: exit %d: %s", strings.Join(exec[1:], " "), code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "nothing to reap") {
		t.Errorf("stdout %q", stdout.String())
	}
}
