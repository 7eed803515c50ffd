package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// targetAirlockInject is airlock with credential injection on: the same rule as the airlock
// leg, plus an Authorization header from a file secret (cleartext allowed, since the bench
// upstream speaks plain HTTP) and the broker's response redaction on every response body.
const targetAirlockInject = "airlock-inject"

// injectPolicy is benchPolicy with an inject entry; %%s is the secret file, %%d the port.
const injectPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: bench-inject
spec:
  mode: enforce
  egress:
    - name: bench-upstream
      cidrs: ["127.0.0.1/32"]
      ports: [%%d]
      allowCleartext: true
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "bench-token" }}'
  secrets:
    bench-token: {file: %q}
`

func startAirlockInject(ctx context.Context, e *env, dir string) (*proxyRun, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	secret := filepath.Join(dir, "bench-token")
	if err := os.WriteFile(secret, []byte("bench-secret-value-0123456789abcdef\n"), 0o600); err != nil {
		return nil, err
	}
	return startAirlockPolicy(ctx, e, dir, fmt.Sprintf(injectPolicy, secret))
}

// printInjectReport prints the cost of injection per request: the inject leg's req/s over
// the plain airlock leg's, and the per-request time it adds.
func printInjectReport(w io.Writer, legs []*leg) {
	var air, inj *leg
	for _, l := range legs {
		switch l.name {
		case targetAirlock:
			air = l
		case targetAirlockInject:
			inj = l
		}
	}
	if air == nil || inj == nil {
		return
	}
	fmt.Fprintln(w)
	line := "injection overhead: airlock-inject/airlock " + ratioOrWhy(inj, air, true)
	if rs := validRatios(inj, air); len(rs) > 0 {
		if a, i := cpuPerRequest(air), cpuPerRequest(inj); a > 0 && i > 0 {
			line += fmt.Sprintf("; proxy CPU per request %.1f µs vs %.1f µs (+%.1f µs)", i, a, i-a)
		}
	}
	fmt.Fprintln(w, strings.TrimSpace(line))
}

// cpuPerRequest is the proxy CPU time per request, in µs, summed over the valid rounds.
func cpuPerRequest(l *leg) float64 {
	var cpuSec, reqs float64
	for _, r := range l.rounds {
		cpuSec += r.cpu * r.res.elapsed.Seconds()
		reqs += float64(r.res.requests)
	}
	if reqs == 0 {
		return 0
	}
	return cpuSec / reqs * 1e6
}
