package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// newResolver returns the resolver the proxy and the model API use: --upstream-dns, else the
// policy's dns.upstreams, else the system's (/etc/resolv.conf).
func newResolver(flagAddr string, pol *policy.Policy) (*net.Resolver, error) {
	var upstreams []string
	switch {
	case flagAddr == Off:
		return nil, errors.New("--upstream-dns off: the proxy needs a resolver")
	case flagAddr != "":
		upstreams = strings.Split(flagAddr, ",")
	default:
		upstreams = pol.DNS().Upstreams
	}
	if len(upstreams) == 0 {
		return &net.Resolver{PreferGo: true}, nil
	}
	aps, err := policy.ParseUpstreams(upstreams)
	if err != nil {
		return nil, fmt.Errorf("upstream DNS: %w", err)
	}
	addrs := make([]string, len(aps))
	for i, ap := range aps {
		addrs[i] = ap.String()
	}
	var d net.Dialer
	return &net.Resolver{
		PreferGo: true,
		// Dial ignores the server the Go resolver picked from resolv.conf and asks ours, in
		// order, so the sidecar never falls back to a resolver the operator did not name.
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var firstErr error
			for _, u := range addrs {
				c, err := d.DialContext(ctx, network, u)
				if err == nil {
					return c, nil
				}
				if firstErr == nil {
					firstErr = err
				}
			}
			return nil, firstErr
		},
	}, nil
}
