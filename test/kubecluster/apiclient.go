package kubecluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// dialInside dials addr from inside the cluster's network namespace, where the API server
// listens on 127.0.0.1, on a locked thread that joins the namespace for the dial and returns
// to its own afterwards. The thread must live on: a component started from it with
// Pdeathsig would be killed if it ended. The socket stays in the namespace it was made in.
func (c *Cluster) dialInside(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	res := make(chan result, 1)
	go func() {
		conn, err := c.dialLocked(ctx, network, addr)
		res <- result{conn, err}
	}()
	r := <-res
	return r.conn, r.err
}

func (c *Cluster) dialLocked(ctx context.Context, network, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open this thread's network namespace: %w", err)
	}
	defer unix.Close(orig)
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", c.pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open the cluster's network namespace: %w", err)
	}
	defer unix.Close(ns)
	if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter the cluster's network namespace: %w", err)
	}
	var d net.Dialer
	conn, dialErr := d.DialContext(ctx, network, addr)
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Left locked: the thread is in the wrong namespace and ends with this goroutine.
		if conn != nil {
			conn.Close()
		}
		return nil, fmt.Errorf("return from the cluster's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return conn, dialErr
}

// apiClient is an HTTPS client of the API server as the admin (system:masters), dialing
// inside the cluster's network namespace: for the readiness poll, which would otherwise
// start a kubectl every half second while the API server comes up.
func (c *Cluster) apiClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.path("pki", "admin.crt"), c.path("pki", "admin.key"))
	if err != nil {
		return nil, fmt.Errorf("load the admin certificate: %w", err)
	}
	ca, err := os.ReadFile(c.path("pki", "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("the cluster CA holds no certificate")
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:     c.dialInside,
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

// apiReady reports whether the API server answers /readyz with ok.
func apiReady(ctx context.Context, client *http.Client) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, APIServer+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok"
}
