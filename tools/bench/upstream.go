package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// upstreamRole is the first argument that turns this binary into the upstream server.
const upstreamRole = "upstream-child"

// servedPath answers how many benchmark requests the upstream has served. The bench asks it
// directly (never through a proxy) to prove that every counted response came from upstream,
// not from a proxy cache or error page.
const servedPath = "/__airlock_bench/served"

// upstreamBody is the fixed response body: tiny, so the bench measures per-request proxy
// overhead rather than copy bandwidth.
const upstreamBody = "airlock-bench ok\n"

// runUpstreamChild serves HTTP/1.1 with keep-alive on 127.0.0.1:0, prints "listening ADDR"
// on stdout, and exits when its stdin reaches EOF (the bench closed it, or died).
func runUpstreamChild() int {
	var served atomic.Int64
	body := []byte(upstreamBody)
	clen := strconv.Itoa(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == servedPath {
			fmt.Fprintf(w, "%d\n", served.Load())
			return
		}
		served.Add(1)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Length", clen)
		w.Write(body)
	})
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(os.Stderr, "upstream: ", 0),
	}
	return serveChild("upstream", srv)
}

// serveChild is the body of every server child role: it serves srv on 127.0.0.1:0, prints
// "listening ADDR" on stdout, and returns (the child's exit code) when its stdin reaches EOF
// (the bench closed it, or died).
func serveChild(name string, srv *http.Server) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: listen: %v\n", name, err)
		return 1
	}
	go srv.Serve(ln)
	fmt.Printf("listening %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// upstream is the running upstream child.
type upstream struct {
	addr   string
	p      *proc
	client *http.Client // direct: never a proxy, whatever HTTP_PROXY says
}

// startUpstream re-executes this binary as the upstream server, in its own process so its
// CPU is not mixed with the bench's (and, for the Go load generator, with the load).
func startUpstream(ctx context.Context, dir string) (*upstream, error) {
	p, addr, err := startSelf(ctx, "upstream", upstreamRole, nil, filepath.Join(dir, "upstream.log"))
	if err != nil {
		return nil, err
	}
	return &upstream{addr: addr, p: p, client: &http.Client{
		Transport: &http.Transport{Proxy: nil},
		Timeout:   5 * time.Second,
	}}, nil
}

// startSelf re-executes this binary with role as its only argument (and environ as its
// environment; nil inherits the bench's). The child prints "listening ADDR" on stdout and
// exits when its stdin reaches EOF, which stop causes by closing it. startSelf returns
// once ADDR accepts connections.
func startSelf(ctx context.Context, name, role string, environ []string, logPath string) (*proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("find own executable: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, "", err
	}
	defer outR.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, "", err
	}
	cmd := exec.Command(self, role)
	cmd.Env = environ
	cmd.Stdout = outW
	cmd.Stdin = inR
	p, err := startProc(name, cmd, logPath)
	outW.Close()
	inR.Close()
	if err != nil {
		inW.Close()
		return nil, "", err
	}
	p.onStop = append(p.onStop, func() { inW.Close() })

	outR.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(outR).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		p.stop()
		return nil, "", fmt.Errorf("%s did not report its address (%v, %q); log:\n%s", name, err, line, indent(p.logTail(10)))
	}
	if err := waitReady(ctx, p, 10*time.Second, dialCheck(addr)); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, addr, nil
}

// served returns how many benchmark requests the upstream has answered so far.
func (u *upstream) served() (int64, error) {
	resp, err := u.client.Get("http://" + u.addr + servedPath)
	if err != nil {
		return 0, fmt.Errorf("ask upstream for its count: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("ask upstream for its count: %w", err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
