package credentials

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestRedactorForms(t *testing.T) {
	r := NewRedactor()
	const v = "tok/en+with?odd=chars&1"
	if !r.Add(v) {
		t.Fatal("Add returned false for a long value")
	}
	for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v)),
		base64.RawURLEncoding.EncodeToString([]byte(v)), url.QueryEscape(v), url.PathEscape(v)} {
		got := r.String("before " + form + " after")
		if strings.Contains(got, form) || got != "before "+Redacted+" after" {
			t.Errorf("form %q: got %q", form, got)
		}
	}
	if r.Add("abc") {
		t.Error("a 3-byte value was accepted for redaction")
	}
	if got := r.String("abc"); got != "abc" {
		t.Errorf("short value redacted: %q", got)
	}
}

func TestRedactorHeaderBodyWriter(t *testing.T) {
	r := NewRedactor()
	r.Add("hunter2-secret")
	h := http.Header{"X-Echo": {"Bearer hunter2-secret"}, "Other": {"fine"}}
	r.Header(h)
	if h.Get("X-Echo") != "Bearer "+Redacted || h.Get("Other") != "fine" {
		t.Fatalf("headers: got %v", h)
	}
	body := r.Body(io.NopCloser(strings.NewReader(strings.Repeat("a", 40000) + "hunter2-secret" + "tail")))
	got, err := io.ReadAll(body)
	if err != nil || bytes.Contains(got, []byte("hunter2")) || !bytes.HasSuffix(got, []byte(Redacted+"tail")) {
		t.Fatalf("body: err %v, tail %q", err, got[len(got)-20:])
	}
	var buf bytes.Buffer
	w := r.Writer(&buf)
	n, err := w.Write([]byte(`{"msg":"x hunter2-secret"}` + "\n"))
	if err != nil || n != 27 || strings.Contains(buf.String(), "hunter2") {
		t.Fatalf("writer: n %d err %v out %q", n, err, buf.String())
	}
	// A value learned later is scrubbed from then on; the old ones stay.
	r.Add("rotated-value")
	if got := r.String("hunter2-secret rotated-value"); got != Redacted+" "+Redacted {
		t.Fatalf("after rotation: %q", got)
	}
}

// TestRedactorBase64Alignments: a value inside a larger base64-encoded blob is scrubbed at
// every alignment (byte offset mod 3), in both alphabets, padded or not, whatever bytes
// surround it.
func TestRedactorBase64Alignments(t *testing.T) {
	r := NewRedactor()
	const v = "hunter2-secret-value"
	r.Add(v)
	encs := map[string]*base64.Encoding{"std": base64.StdEncoding, "raw-std": base64.RawStdEncoding,
		"url": base64.URLEncoding, "raw-url": base64.RawURLEncoding}
	for name, enc := range encs {
		for off := range 3 {
			for _, around := range []string{"\x00", "\xff", "a"} {
				blob := enc.EncodeToString([]byte(strings.Repeat(around, off) + v + strings.Repeat(around, 5)))
				got := r.String(blob)
				if !strings.Contains(got, Redacted) {
					t.Errorf("%s offset %d around %q: %q not scrubbed", name, off, around, blob)
				}
				if core := base64Core(enc.WithPadding(base64.NoPadding), []byte(v), off); strings.Contains(got, core) {
					t.Errorf("%s offset %d: core %q survives in %q", name, off, core, got)
				}
			}
		}
	}
}

// TestFilterResponseEncodings: an encoding the broker cannot decode passes scrubbed as is
// when no secret was injected, and is refused when one was.
func TestFilterResponseEncodings(t *testing.T) {
	r := NewRedactor()
	r.Add("hunter2-secret-value")
	b := &Broker{red: r}
	mk := func() *http.Response {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Encoding": {"compress"}},
			Body: io.NopCloser(strings.NewReader("x hunter2-secret-value y"))}
	}
	resp, err := b.FilterResponse(mk(), false)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if string(got) != "x "+Redacted+" y" || resp.Header.Get("Content-Encoding") != "compress" {
		t.Fatalf("not injected: got %q, %v", got, resp.Header)
	}
	if _, err := b.FilterResponse(mk(), true); !errors.Is(err, ErrUndecodable) {
		t.Fatalf("injected: got %v, want ErrUndecodable", err)
	}
	h := http.Header{"Content-Encoding": {"gzip, gzip, gzip, gzip"}}
	if _, err := b.FilterResponse(&http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(""))}, true); !errors.Is(err, ErrUndecodable) {
		t.Fatalf("four stacked codings: got %v, want ErrUndecodable", err)
	}
}
