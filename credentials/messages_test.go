package credentials

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// grpcFrame is one length-prefixed gRPC message.
func grpcFrame(flag byte, msg []byte) []byte {
	out := []byte{flag, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFilterGRPCResponse(t *testing.T) {
	h := newHarness(t)
	if _, err := h.b.Value(context.Background(), "tok"); err != nil {
		t.Fatal(err)
	}
	masked := "[" + strings.Repeat("*", len("tok-value-123")) + "]"
	for _, tc := range []struct {
		name     string
		encoding string
		body     []byte
		injected bool
		want     []byte // nil: the body fails
	}{
		{"plain messages", "", append(grpcFrame(0, []byte("[tok-value-123]")), grpcFrame(0, []byte("next"))...), true,
			append(grpcFrame(0, []byte(masked)), grpcFrame(0, []byte("next"))...)},
		{"gzip message is decoded", "gzip", grpcFrame(1, gzipped(t, []byte("[tok-value-123]"))), true, grpcFrame(0, []byte(masked))},
		{"unknown compression after injection", "snappy", grpcFrame(1, []byte("??")), true, nil},
		{"unknown compression without injection", "snappy", grpcFrame(1, []byte("??")), false, grpcFrame(1, []byte("??"))},
		{"truncated message", "", grpcFrame(0, []byte("abc"))[:6], true, nil},
		{"oversized message", "", []byte{0, 0xff, 0xff, 0xff, 0xff}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/grpc+proto"}, "Grpc-Encoding": {tc.encoding}},
				Body: io.NopCloser(bytes.NewReader(tc.body)), Trailer: http.Header{"Grpc-Message": {"tok-value-123"}}}
			resp, err := h.b.FilterResponse(resp, tc.injected)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
			if strings.Contains(resp.Trailer.Get("Grpc-Message"), "tok-value") {
				t.Fatalf("trailer not scrubbed: %v", resp.Trailer)
			}
		})
	}
}

func TestGRPCRequestPlaceholderRefused(t *testing.T) {
	h := newHarness(t)
	r, err := h.do(t, "POST", "https://q.test/svc/M", http.Header{"Content-Type": {"application/grpc"}},
		string(grpcFrame(0, []byte(h.ph.For("key")))))
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(r.Body)
	var re *RefusalError
	if !errors.As(err, &re) || re.DenyReason() != policy.ReasonCredentialMisuse {
		t.Fatalf("got %v, want a placeholder refusal (no swap inside gRPC messages)", err)
	}
}

func TestRequestMessages(t *testing.T) {
	h := newHarness(t)
	check := func(host string) func([]byte) ([]byte, error) {
		r, err := h.do(t, "GET", "https://"+host+"/ws", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		d := h.pol.Decide(policy.Request{Scheme: "https", Host: host, Method: "GET", Path: "/ws"})
		f, err := h.b.RequestMessages(r, d)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	got, err := check("q.test")([]byte("k=" + h.ph.For("key")))
	if err != nil || string(got) != "k=key/value+456" {
		t.Fatalf("q.test (body placeholders) got %q, %v", got, err)
	}
	_, err = check("api.test")([]byte("k=" + h.ph.For("tok")))
	var re *RefusalError
	if !errors.As(err, &re) || re.DenyReason() != policy.ReasonCredentialMisuse || re.Secret() != "tok" {
		t.Fatalf("api.test (header placeholders only) got %v, want a refusal naming tok", err)
	}
	if got := h.b.ScrubMessage([]byte("x key/value+456 y")); string(got) != "x "+strings.Repeat("*", 13)+" y" {
		t.Fatalf("ScrubMessage got %q", got)
	}
}

// TestStreamHoldsOnlyPartialMatches: a streamed body (SSE) is handed on without waiting for
// more bytes unless its tail could start a secret.
func TestStreamHoldsOnlyPartialMatches(t *testing.T) {
	rep := newReplacer([]pattern{{find: []byte("secret-value"), with: []byte("[R]")}})
	pr, pw := io.Pipe()
	r := rep.Reader(pr)
	go func() { _, _ = pw.Write([]byte("data: one\n\n")) }()
	buf := make([]byte, 64)
	n, err := r.Read(buf) // would block for more input if the whole tail were held
	if err != nil || string(buf[:n]) != "data: one\n\n" {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
	go func() { _, _ = pw.Write([]byte("data: secret-")) }()
	n, _ = r.Read(buf)
	if string(buf[:n]) != "data: " {
		t.Fatalf("got %q, want the possible start of a match held back", buf[:n])
	}
	go func() { _, _ = pw.Write([]byte("value\n\n")); pw.Close() }()
	rest, _ := io.ReadAll(r)
	if string(rest) != "[R]\n\n" {
		t.Fatalf("got %q", rest)
	}
}
