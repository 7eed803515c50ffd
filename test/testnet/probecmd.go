//go:build linux

package testnet

import (
	"bufio"
	"os"
	"os/exec"
	"testing"
)

// ProbeBinary returns the path of the running test binary, which is the sandbox probe when
// started with EnvProbe=1 (see RunProbeIfRequested).
func ProbeBinary(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// StartProbeCommand starts the probe with cmd, a command the caller built to run
// ProbeBinary somewhere (for example through `airlock sandbox exec NAME -- <probe>`), and
// kills it when the test ends. cmd.Env must hold EnvProbe=1 (ProbeEnv) for the probe to be
// reached; stdin and stdout are the protocol's pipes, so the command must pass them through.
func StartProbeCommand(t testing.TB, cmd *exec.Cmd) *SandboxProbe {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sandbox probe: %v", err)
	}
	p := &SandboxProbe{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// ProbeEnv is the environment entry that makes a test binary run as the probe.
const ProbeEnv = EnvProbe + "=1"
