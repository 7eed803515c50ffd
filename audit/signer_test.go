package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// remoteSigner is a signing service as the Logger sees one (not a local key): it signs with
// key, fails while down, and signs with forge (naming key) when forge is set. Every attempt's
// outcome goes to attempts.
type remoteSigner struct {
	key      ed25519.PrivateKey
	forge    ed25519.PrivateKey
	down     atomic.Bool
	attempts chan error
}

func newRemoteSigner(t *testing.T) *remoteSigner {
	return &remoteSigner{key: testKey(t), attempts: make(chan error, 1024)}
}

func (r *remoteSigner) Sign(_ context.Context, msg []byte) (ed25519.PublicKey, []byte, error) {
	var err error
	pub, sig := r.key.Public().(ed25519.PublicKey), []byte(nil)
	switch {
	case r.down.Load():
		err = errors.New("signing service unreachable")
	case r.forge != nil:
		sig = ed25519.Sign(r.forge, msg)
	default:
		sig = ed25519.Sign(r.key, msg)
	}
	select {
	case r.attempts <- err:
	default:
	}
	return pub, sig, err
}

func (r *remoteSigner) String() string { return "test signing service" }

// await reads attempts until one whose failure is want (nil: a success).
func (r *remoteSigner) await(t *testing.T, wantFail bool) {
	t.Helper()
	deadline := time.After(30 * time.Second) // a hang guard, not a synchronisation
	for {
		select {
		case err := <-r.attempts:
			if (err != nil) == wantFail {
				return
			}
		case <-deadline:
			t.Fatalf("no signing attempt with failure=%v", wantFail)
		}
	}
}

func commitN(t *testing.T, l *Logger, n int, tag string) {
	t.Helper()
	for i := range n {
		if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: fmt.Sprintf("%s%d.test:443", tag, i)}); err != nil {
			t.Fatalf("Commit while signing lags: %v (requests must not wait for signing)", err)
		}
	}
}

// A signing service that fails: events keep being committed, the checkpoints wait (none is
// written unsigned), /readyz's source (Signing) says so, and once the service answers they
// are signed in order, and the trail verifies with the service's key. The chain records the
// outage and the recovery.
func TestRemoteSignerOutageKeepsTheChainAndSignsLater(t *testing.T) {
	r := newRemoteSigner(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	r.down.Store(true)
	l, err := New(Options{Sandbox: "sb", Writer: io.Discard, File: path, Signer: r, MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	commitN(t, l, 5, "down") // each batch after the first rotates: rotation checkpoints
	r.await(t, true)
	r.await(t, true) // the retry comes after the first failure was recorded
	st := l.Signing()
	if !st.Lagging() || st.Pending == 0 || !strings.Contains(st.LastError, "unreachable") {
		t.Fatalf("Signing while the service is down: %+v, want lagging with pending checkpoints", st)
	}
	if b, _ := os.ReadFile(path + ".checkpoints"); len(b) != 0 {
		t.Fatalf("checkpoints written while the signer was down:\n%s", b)
	}
	r.down.Store(false)
	r.await(t, false)
	r.await(t, false) // the next signature comes after the recovery was recorded
	commitN(t, l, 3, "up")
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := l.Signing(); st.Lagging() || st.Pending != 0 || st.Signed == 0 {
		t.Fatalf("Signing after recovery: %+v", st)
	}
	files, _ := filepath.Glob(path + "*")
	rep, err := VerifyWith(files, VerifyOptions{Key: r.key.Public().(ed25519.PublicKey)})
	if err != nil || !rep.Proven() {
		t.Fatalf("verify: %+v %+v %v, want proven", rep.Tampered, rep.Unanchored, err)
	}
	var logs []byte
	for _, f := range files {
		if !strings.HasSuffix(f, ".checkpoints") {
			b, _ := os.ReadFile(f)
			logs = append(logs, b...)
		}
	}
	if n := strings.Count(string(logs), `"reason":"audit_signing_unavailable"`); n != 2 {
		t.Errorf("%d audit_signing_unavailable events in the chain, want 2 (failure, recovery):\n%s", n, logs)
	}
}

// A service still down at Close: Close says which checkpoints were left unsigned, and none
// is written (no local fallback): verify with the key finds the trail not proven.
func TestRemoteSignerDownAtCloseFailsClosed(t *testing.T) {
	r := newRemoteSigner(t)
	r.down.Store(true)
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := New(Options{Sandbox: "sb", Writer: io.Discard, File: path, Signer: r, SignGrace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	commitN(t, l, 3, "h")
	err = l.Close()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "left unsigned") {
		t.Fatalf("Close with the signer down: %v, want the unsigned checkpoints named", err)
	}
	if b, _ := os.ReadFile(path + ".checkpoints"); len(b) != 0 {
		t.Fatalf("checkpoints written without the signer:\n%s", b)
	}
	rep, err := VerifyWith([]string{path}, VerifyOptions{Key: r.key.Public().(ed25519.PublicKey)})
	if err != nil || rep.Proven() || rep.Unanchored == nil {
		t.Fatalf("verify: %+v %v, want unanchored", rep, err)
	}
}

// A service that answers with a signature its named key does not verify (a forgery, or
// another key's): the checkpoint is refused, retried, never written.
func TestRemoteSignerForgedSignatureIsNotWritten(t *testing.T) {
	r := newRemoteSigner(t)
	r.forge = testKey(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := New(Options{Sandbox: "sb", Writer: io.Discard, File: path, Signer: r, SignGrace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	commitN(t, l, 2, "h")
	err = l.Close()
	if err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("Close: %v, want the forged signature refused", err)
	}
	if b, _ := os.ReadFile(path + ".checkpoints"); len(b) != 0 {
		t.Fatalf("a forged checkpoint was written:\n%s", b)
	}
}
