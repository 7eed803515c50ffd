//go:build linux

package testnet

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// GitSSHPort is the port the SSH git server listens on.
const GitSSHPort = 22

// GitSSHServer serves a GitServer's repository over SSH, as a git host does: an exec request
// for `git-upload-pack '/repo.git'` (fetch) or `git-receive-pack '/repo.git'` (push) runs the
// real git on the bare repository with the channel as its stdin and stdout. It is written with
// golang.org/x/crypto/ssh, in the test process, rather than a configured sshd: no host key,
// config or daemon on disk, a port in the upstream namespace only, and a record of each
// command run. Any client is let in without authentication: who may reach the port at all is
// what the tests decide (raw TCP, in the kernel).
type GitSSHServer struct {
	// Addr is the server's address (port GitSSHPort).
	Addr netip.Addr
	// URL is the repository's SSH URL, ssh://git@Addr/repo.git.
	URL string

	git *GitServer
	// mu guards execs.
	mu    sync.Mutex
	execs []string
}

// StartGitSSHServer gives the upstream namespace addr and serves g's repository over SSH on
// it until t ends.
func (w *World) StartGitSSHServer(t testing.TB, g *GitServer, addr netip.Addr) *GitSSHServer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	s := &GitSSHServer{Addr: addr, URL: fmt.Sprintf("ssh://git@%s%s", addr, GitRepoPath), git: g}
	w.AddUpstreamAddr(t, addr)
	l, err := w.Upstream.Listen("tcp", netip.AddrPortFrom(addr, GitSSHPort).String())
	if err != nil {
		t.Fatalf("testnet: git ssh server: listen: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); s.serveConn(c, cfg) }()
		}
	}()
	return s
}

// Execs returns the commands clients ran, oldest first.
func (s *GitSSHServer) Execs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.execs...)
}

func (s *GitSSHServer) serveConn(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go s.serveSession(ch, creqs)
	}
}

// serveSession answers a session's requests: env and the like are refused, the first exec
// runs, and its exit status ends the session.
func (s *GitSSHServer) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(false, nil)
			continue
		}
		command, ok := sshString(req.Payload)
		_ = req.Reply(ok, nil)
		if !ok {
			return
		}
		status := s.run(ch, command)
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], status)
		_, _ = ch.SendRequest("exit-status", false, b[:])
		return
	}
}

// run runs one git command, `git-upload-pack '/repo.git'` or `git-receive-pack '/repo.git'`,
// and returns its exit status.
func (s *GitSSHServer) run(ch ssh.Channel, command string) uint32 {
	s.mu.Lock()
	s.execs = append(s.execs, command)
	s.mu.Unlock()
	prog, arg, _ := strings.Cut(command, " ")
	if (prog != "git-upload-pack" && prog != "git-receive-pack") || strings.Trim(arg, "'") != GitRepoPath {
		fmt.Fprintf(ch.Stderr(), "git ssh server: only git-upload-pack or git-receive-pack '%s', not %q\n", GitRepoPath, command)
		return 1
	}
	cmd := exec.Command(s.git.gitBin, strings.TrimPrefix(prog, "git-"), s.git.bare)
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return uint32(exit.ExitCode())
	default:
		fmt.Fprintf(ch.Stderr(), "git ssh server: %v\n", err)
		return 1
	}
}

// sshString decodes an SSH string (a uint32 length, then the bytes), the payload of an exec
// request.
func sshString(b []byte) (string, bool) {
	if len(b) < 4 {
		return "", false
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) != uint64(len(b)-4) {
		return "", false
	}
	return string(b[4:]), true
}
