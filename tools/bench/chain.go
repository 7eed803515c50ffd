package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// targetAirlockSquid is airlock chained to Squid (issue 28): airlock with the airlock leg's
// policy and --upstream-proxy pointing at a Squid configured as the squid leg's, so every
// request costs airlock's work plus a CONNECT tunnel through Squid. Its CPU column counts
// airlock's process only; Squid's runs beside it.
const targetAirlockSquid = "airlock-squid"

func startAirlockSquid(ctx context.Context, e *env, dir string) (*proxyRun, error) {
	sqDir := filepath.Join(dir, "squid")
	if err := os.MkdirAll(sqDir, 0o755); err != nil {
		return nil, err
	}
	sq, err := startSquid(ctx, e, sqDir)
	if err != nil {
		return nil, err
	}
	_, portStr, _ := strings.Cut(e.upstream.addr, ":")
	port, _ := strconv.Atoi(portStr)
	pr, err := startAirlockWith(ctx, e, dir, fmt.Appendf(nil, benchPolicy, port),
		airlockOpts{upstreamDNS: "127.0.0.1:53", args: []string{"--upstream-proxy", "http://" + sq.addr}})
	if err != nil {
		sq.p.stop()
		return nil, err
	}
	pr.p.onStop = append(pr.p.onStop, sq.p.stop)
	return pr, nil
}

// printChainReport prints the chained leg against Squid alone: what putting airlock in front
// of an existing corporate proxy costs.
func printChainReport(w io.Writer, legs []*leg) {
	var chain, sq *leg
	for _, l := range legs {
		switch l.name {
		case targetAirlockSquid:
			chain = l
		case "squid":
			sq = l
		}
	}
	if chain == nil || sq == nil {
		return
	}
	fmt.Fprintf(w, "airlock chained to squid / squid alone: %s\n", ratioOrWhy(chain, sq, true))
}
