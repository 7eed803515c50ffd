package credentials

import (
	"bytes"
	"encoding/base64"
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
