package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// squidTargetRatio is the goal: airlock at least twice Squid's keep-alive req/s.
const squidTargetRatio = 2.0

// printReport prints the machine facts, one table and the ratios.
func printReport(w io.Writer, cfg config, gen generator, e *env, legs []*leg) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "airlock bench — proxied keep-alive HTTP/1.1 GET, policy and audit on (except the go-nethttp reference)")
	for _, f := range machineFacts(gen, legs, e) {
		fmt.Fprintf(w, "  %-11s %s\n", f[0]+":", f[1])
	}
	threads := fmt.Sprintf("%d threads", cfg.threads)
	if _, ok := gen.(goGenerator); ok {
		threads = "one goroutine each"
	}
	fmt.Fprintf(w, "  %-11s %d connections, %s; %d rounds of %s per target, taking turns, after a %s warm-up; timeout %s\n",
		"load:", cfg.connections, threads, cfg.rounds, cfg.duration, cfg.warmup, cfg.timeout)
	fmt.Fprintf(w, "  %-11s Go net/http in its own process, %d-byte body; all traffic on 127.0.0.1\n", "upstream:", len(upstreamBody))
	fmt.Fprintln(w)

	byName := map[string]*leg{}
	for _, l := range legs {
		byName[l.name] = l
	}
	direct := byName[targetDirect]

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\treq/s\tmin–max\tp50\tp99\terrors\tvs direct\tproxy CPU\taudit lines\t")
	for _, l := range legs {
		if len(l.rounds) == 0 {
			fmt.Fprintf(tw, "%s\tFAILED\t-\t-\t-\t-\t-\t-\t%s\t\n", l.name, auditCell(l))
			continue
		}
		rps := fmt.Sprintf("%.0f", median(l.rps()))
		if l.problem != "" {
			rps = "INVALID"
		}
		m := l.medianRound()
		var errs int64
		var cpus []float64
		for _, r := range l.rounds {
			errs += r.res.errs.total()
			cpus = append(cpus, r.cpu)
		}
		cpu := "-"
		if l.pr != nil {
			cpu = fmt.Sprintf("%.2f cores", median(cpus))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f–%.0f\t%s\t%s\t%d\t%s\t%s\t%s\t\n", l.name, rps,
			slices.Min(l.rps()), slices.Max(l.rps()), ms(m.res.p50), ms(m.res.p99), errs,
			ratioOrWhy(l, direct, false), cpu, auditCell(l))
	}
	tw.Flush()
	fmt.Fprintln(w, "(req/s and ratios are medians over rounds; p50/p99 from the median round; proxy CPU counts the proxy and its child processes)")
	if byName[targetNetHTTP] != nil {
		fmt.Fprintf(w, "(%s is the reference leg: a bare net/http forwarder with no policy or audit, the ceiling of a net/http-based proxy on this machine; GOGC default 100, where airlock runs with GC target 400)\n", targetNetHTTP)
	}

	var notes []string
	for _, l := range legs {
		if l.problem != "" {
			notes = append(notes, fmt.Sprintf("%s: %s", l.name, l.problem))
		}
		if l.closes {
			var rc int64
			for _, r := range l.rounds {
				rc += r.reconnects
			}
			notes = append(notes, fmt.Sprintf("%s closes the client connection after every response (no client keep-alive) "+
				"without a \"Connection: close\" header: its figure includes a TCP connect per request, and the %d read errors "+
				"of reusing a closed connection are not counted as errors", l.name, rc))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
	}

	if sq := byName["squid"]; sq != nil && sq.pr != nil && len(sq.pr.conf) > 0 {
		mode := "squid -N: one process, no SMP"
		if cfg.squidWorkers > 1 {
			mode = fmt.Sprintf("squid --foreground: SMP, %d workers", cfg.squidWorkers)
		}
		// Frozen in the bench (squidConf in targets.go): only the workers follow a flag.
		printSquidConf(w, fmt.Sprintf("Squid's configuration in this run (%s; access log through the logfile daemon; no cache):", mode), sq.pr.conf)
	}

	air := byName[targetAirlock]
	if air == nil {
		return
	}
	fmt.Fprintln(w)
	for _, other := range allTargets() {
		if o := byName[other]; o != nil && o != air {
			fmt.Fprintf(w, "airlock/%-10s %s\n", other, ratioOrWhy(air, o, true))
		}
	}
	if sq := byName["squid"]; sq != nil {
		verdict := ""
		if rs := validRatios(air, sq); len(rs) > 0 {
			verdict = ": met"
			if median(rs) < squidTargetRatio {
				verdict = ": NOT met"
			}
		}
		fmt.Fprintf(w, "airlock vs squid: %s (target ≥ %g×)%s\n", ratioOrWhy(air, sq, false), squidTargetRatio, verdict)
	}
}

// printSquidConf prints the configuration Squid ran with, under title.
func printSquidConf(w io.Writer, title string, conf []byte) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, title)
	for _, line := range strings.Split(strings.TrimSpace(string(conf)), "\n") {
		fmt.Fprintln(w, "  | "+line)
	}
}

func auditCell(l *leg) string {
	if isReference(l.name) {
		return "n/a (reference)"
	}
	if l.audit == nil {
		return "-"
	}
	return strconv.FormatInt(l.audit.lines, 10)
}

// validRatios returns a's per-round ratios over b, or nil when either leg is not valid.
func validRatios(a, b *leg) []float64 {
	if a == nil || b == nil || a.problem != "" || b.problem != "" {
		return nil
	}
	return ratios(a, b)
}

// ratioOrWhy renders the median ratio of a over b, with every round's ratio when perRound.
func ratioOrWhy(a, b *leg, perRound bool) string {
	switch {
	case b == nil:
		return "-"
	case a.problem != "":
		return "n/a (" + a.name + " did not measure validly)"
	case b.problem != "":
		return "n/a (" + b.name + " did not measure validly)"
	}
	rs := ratios(a, b)
	if len(rs) == 0 {
		return "n/a"
	}
	out := fmt.Sprintf("%.2f×", median(rs))
	if perRound && len(rs) > 1 {
		var each []string
		for _, r := range rs {
			each = append(each, fmt.Sprintf("%.2f", r))
		}
		out += "  (rounds: " + strings.Join(each, ", ") + ")"
	}
	return out
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// machineFacts are the facts a reader needs to reproduce the figures.
func machineFacts(gen generator, legs []*leg, e *env) [][2]string {
	facts := [][2]string{
		{"cpu", fmt.Sprintf("%s, %d cores (runtime.NumCPU), shared by load generator, upstream and proxy", cpuModel(), runtime.NumCPU())},
		{"kernel", firstLine(readFile("/proc/sys/kernel/osrelease"))},
		{"go", runtime.Version()},
		{"loadgen", gen.name()},
	}
	if wg, ok := gen.(wrkGenerator); ok {
		facts[len(facts)-1][1] += ": " + cmdFirstLine(wg.path, "-v")
	}
	for _, l := range legs {
		switch l.name {
		case targetAirlock:
			if e.airlockBin != "" {
				facts = append(facts, [2]string{"airlock", cmdFirstLine(e.airlockBin, "version") + " (policy enforce, audit to file and stderr)"})
			}
		case "squid":
			if p, err := findBinary("squid", "squid-openssl"); err == nil {
				facts = append(facts, [2]string{"squid", fmt.Sprintf("%s (workers %d, no cache, access_log via logfile daemon)",
					cmdFirstLine(p, "-v"), e.cfg.squidWorkers)})
			}
		case "tinyproxy":
			if p, err := findBinary("tinyproxy", "tinyproxy"); err == nil {
				facts = append(facts, [2]string{"tinyproxy", cmdFirstLine(p, "-v")})
			}
		case targetNetHTTP:
			facts = append(facts, [2]string{targetNetHTTP, "reference: this binary as a bare net/http forwarder " +
				"(http.Transport, MaxIdleConnsPerHost 256; no policy, audit or SSRF guard; GOGC default)"})
		}
	}
	return facts
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func readFile(path string) string {
	b, _ := os.ReadFile(filepath.Clean(path))
	return string(b)
}

// cmdFirstLine runs a version command and returns the first line it prints, whatever its
// exit status (wrk -v exits 1).
func cmdFirstLine(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if l := firstLine(string(out)); l != "" {
		return l
	}
	return "(unknown version)"
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l)
}
