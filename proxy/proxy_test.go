package proxy

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestNewValidates(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no policy", cfg: Config{CA: ca}},
		{name: "no CA", cfg: Config{Policy: src}},
		{name: "negative limit", cfg: Config{Policy: src, CA: ca, MaxTunnels: -1}},
		{name: "negative timeout", cfg: Config{Policy: src, CA: ca, DialTimeout: -time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("got %v, want ErrInvalidConfig", err)
			}
		})
	}
	p, err := New(Config{Policy: src, CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	if p.cfg.MaxTunnels != DefaultMaxTunnels || p.cfg.DialTimeout != DefaultDialTimeout ||
		p.cfg.MaxRequestBodyBytes != DefaultMaxRequestBodyBytes || p.cfg.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("defaults not applied: %+v", p.cfg)
	}
}

func TestNewUnwindsMetricsOnFailure(t *testing.T) {
	ca, _ := LoadOrCreateCA(t.TempDir(), nil)
	reg := prometheus.NewRegistry()
	// Something else already owns the last collector's name: New fails on it...
	reg.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "airlock_proxy_request_duration_seconds"}, []string{"kind"}))
	cfg := Config{Policy: newSource(mustPolicy(t, policyDoc("basic", "enforce", basicEgress))), CA: ca, Registerer: reg}
	if _, err := New(cfg); err == nil {
		t.Fatal("New registered a duplicate metric")
	}
	// ...and leaves nothing of its own behind.
	if err := reg.Register(newMetrics().requests); err != nil {
		t.Errorf("requests_total still registered after a failed New: %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	ca, _ := LoadOrCreateCA(t.TempDir(), nil)
	p, err := New(Config{Policy: newSource(mustPolicy(t, policyDoc("basic", "enforce", basicEgress))), CA: ca, OriginalDst: &origDst{}})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan error, 2)
	go func() { done <- p.Serve(l) }()
	go func() { done <- p.ServeTransparent(tl) }()
	// Both listeners accept before Close (a connection that is served proves it).
	for _, a := range []string{l.Addr().String(), tl.Addr().String()} {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	for range 2 {
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	for range 2 {
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	}
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := p.Serve(l2); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve after Close returned %v, want ErrClosed", err)
	}
	if _, err := net.Dial("tcp", l2.Addr().String()); err == nil {
		t.Error("Serve after Close left its listener open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestShutdownClosesTunnelsAtDeadline(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	c, resp := h.connect("api.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT got %d", resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: the open tunnel is closed
	if err := h.p.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with an open tunnel and no time returned %v, want context.Canceled", err)
	}
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err == nil {
		t.Error("the tunnel is still open after Shutdown gave up")
	}
	h.log.wait(t, 1)
}
