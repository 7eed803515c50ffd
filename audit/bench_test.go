package audit

import (
	"bytes"
	"io"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// cpuPerOp reports the process's CPU time (user and system, every goroutine and the
// writer's system calls included) per operation as cpu-ns/op, when stop is called: on a
// shared machine a steadier figure than wall time.
func cpuPerOp(b *testing.B) (stop func()) {
	b.Helper()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op") }
}

// The cost of the chain and of write-before-respond, on a real file: Log (queued, written
// by the writer later) against Commit (returns once the write is done), one caller at a time
// and many at once (group commit).

func benchLogger(b *testing.B) *Logger {
	b.Helper()
	key, err := GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(Options{Writer: io.Discard, File: filepath.Join(b.TempDir(), "audit.log"), Key: key})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

var benchEvent = Event{Kind: KindHTTP, Decision: DecisionAllow, Rule: "github-api", Reason: "rule_matched",
	Destination: "api.github.com:443", Addr: "140.82.112.6:443", Method: "GET", Path: "/repos/acme/app",
	Status: 200, BytesDown: 1234, Client: "10.0.0.2:51234", Policy: "repo-write", RequestID: "0123456789abcdef0123456789abcdef"}

func BenchmarkLog(b *testing.B) {
	l := benchLogger(b)
	for b.Loop() {
		l.Log(benchEvent)
	}
}

func BenchmarkCommitSerial(b *testing.B) {
	l := benchLogger(b)
	defer cpuPerOp(b)()
	for b.Loop() {
		if err := l.Commit(benchEvent); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCommitParallel(b *testing.B) {
	l := benchLogger(b)
	b.SetParallelism(16)
	defer cpuPerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Commit(benchEvent); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkEncodeChain is the chain's own cost per event: encoding plus the SHA-256 of the line.
func BenchmarkEncodeChain(b *testing.B) {
	var prev [32]byte
	buf := make([]byte, 0, 1024)
	defer cpuPerOp(b)()
	for b.Loop() {
		buf = appendTail(benchEvent.appendBody(buf[:0]), 1, &prev)
		prev = sha256Line(buf)
	}
}

// BenchmarkEncodeOnly is encoding without the chain, for comparison.
func BenchmarkEncodeOnly(b *testing.B) {
	buf := make([]byte, 0, 1024)
	defer cpuPerOp(b)()
	for b.Loop() {
		buf = benchEvent.appendBody(buf[:0])
	}
}

// BenchmarkEncodeReference is the encoder before it was made faster (encode_ref_test.go),
// for comparison with BenchmarkEncodeOnly in the same run.
func BenchmarkEncodeReference(b *testing.B) {
	buf := make([]byte, 0, 1024)
	defer cpuPerOp(b)()
	for b.Loop() {
		buf = benchEvent.refAppendBody(buf[:0])
	}
}

// BenchmarkRequestEvents is the audit's work for one forwarded request as the proxy does it,
// 16 requests at a time: the decision event committed (written before the request goes
// upstream), then the canonical event logged, each line scrubbed by a redactor that knows
// one secret (a stand-in for the credential broker's, whose cost credentials'
// BenchmarkRedactAuditLine measures) into a chained file with signed checkpoints.
func BenchmarkRequestEvents(b *testing.B) {
	secret := []byte("bench-secret-value-0123456789abcdef")
	key, err := GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(Options{Writer: io.Discard, File: filepath.Join(b.TempDir(), "audit.log"), Key: key, Keep: 256,
		Redact: func(line []byte) []byte {
			if bytes.Contains(line, secret) {
				return bytes.ReplaceAll(line, secret, []byte("[REDACTED]"))
			}
			return line
		}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	b.SetParallelism(8)
	b.ReportAllocs()
	defer cpuPerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e := benchEvent
			e.Status, e.BytesDown, e.Phase = 0, 0, PhaseDecision
			if err := l.Commit(e); err != nil {
				b.Error(err)
				return
			}
			e.Status, e.BytesDown, e.Phase, e.Duration = 200, 1234, "", 1234*time.Microsecond
			l.Log(e)
		}
	})
}
