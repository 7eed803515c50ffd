package main

import (
	"fmt"
	"net"
	"net/http"
	"testing"
)

func TestHealth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := fmt.Sprintf("http://%s", ln.Addr())
	for _, tc := range []struct {
		url  string
		code int
	}{
		{base + "/readyz", 0},
		{base + "/healthz", 1},
		{"http://198.18.0.1:9090/readyz", 1}, // not loopback: refused before any request
	} {
		if code, _, stderr := airlock(t, "health", tc.url); code != tc.code {
			t.Errorf("airlock health %s: exit %d (%s), want %d", tc.url, code, stderr, tc.code)
		}
	}
}
