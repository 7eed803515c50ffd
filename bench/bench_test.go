package main

import (
	"io"
	"slices"
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	out := "Running 1s test @ http://127.0.0.1:1/\n" +
		"AIRLOCK_BENCH_RESULT requests=1000 duration_us=2000000 connect=1 read=2 write=3 status=4 timeout=5 p50_us=250 p99_us=1500\n"
	got, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	want := result{requests: 1000, elapsed: 2 * time.Second,
		errs: errCounts{connect: 1, read: 2, write: 3, status: 4, timeout: 5},
		p50:  250 * time.Microsecond, p99: 1500 * time.Microsecond}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got.rps() != 500 {
		t.Errorf("rps: got %v, want 500", got.rps())
	}
	if _, err := parseWrk("wrk: connection refused\n"); err == nil {
		t.Error("got no error for output without a result line")
	}
}

func TestRequest(t *testing.T) {
	tests := []struct {
		name string
		l    load
		want string
	}{
		{"direct", load{upstream: "127.0.0.1:8080"}, "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"},
		{"proxied", load{upstream: "127.0.0.1:8080", proxied: true},
			"GET http://127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(tc.l.request()); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMedianAndRatios(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("odd: got %v, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even: got %v, want 2.5", got)
	}
	mk := func(rates ...int64) *leg {
		lg := &leg{}
		for i, r := range rates {
			if r == 0 {
				continue // this round is missing
			}
			lg.rounds = append(lg.rounds, round{n: i, res: result{requests: r, elapsed: time.Second}})
		}
		return lg
	}
	a, b := mk(200, 300, 400), mk(100, 0, 100)
	if got, want := ratios(a, b), []float64{2, 4}; !slices.Equal(got, want) {
		t.Errorf("ratios: got %v, want %v (only rounds both measured)", got, want)
	}
	if got := a.medianRound().res.requests; got != 300 {
		t.Errorf("median round: got %d requests, want 300", got)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantOnly []string
		wantErr  bool
	}{
		{"defaults", nil, []string{"direct", "airlock", "squid", "tinyproxy"}, false},
		{"only keeps canonical order", []string{"-only", "squid,airlock"}, []string{"airlock", "squid"}, false},
		{"unknown target", []string{"-only", "nginx"}, nil, true},
		{"threads above connections", []string{"-connections", "2", "-threads", "4"}, nil, true},
		{"sub-second duration", []string{"-duration", "500ms"}, nil, true},
		{"unknown loadgen", []string{"-loadgen", "ab"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, io.Discard)
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && !slices.Equal(c.only, tc.wantOnly) {
				t.Errorf("got only %v, want %v", c.only, tc.wantOnly)
			}
		})
	}
}
