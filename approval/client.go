package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"
)

// Client talks to a sidecar's operator socket.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client of the operator socket in stateDir.
func NewClient(stateDir string) *Client {
	path := filepath.Join(stateDir, SocketFile)
	return &Client{socket: path, hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

// List returns the open asks and live grants.
func (c *Client) List(ctx context.Context) ([]Ask, []Grant, error) {
	var l listing
	if err := c.do(ctx, http.MethodGet, "/v1/approvals", nil, &l); err != nil {
		return nil, nil, err
	}
	return l.Asks, l.Grants, nil
}

// Grant grants ask id: scope "" or once, duration (with d), or sandbox.
func (c *Client) Grant(ctx context.Context, id string, scope Scope, d time.Duration) (Grant, error) {
	req := grantRequest{Scope: scope}
	if scope == ScopeDuration {
		req.For = d.String()
	}
	var g Grant
	err := c.do(ctx, http.MethodPost, "/v1/approvals/"+id+"/grant", req, &g)
	return g, err
}

// Deny denies ask id.
func (c *Client) Deny(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/approvals/"+id+"/deny", struct{}{}, nil)
}

// Revoke ends grant id (or denies a pending ask id).
func (c *Client) Revoke(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/approvals/"+id+"/revoke", struct{}{}, nil)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://airlock"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("reach the sidecar's approvals socket %s (is a sidecar running with this --state-dir?): %w", c.socket, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e apiError
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("approvals socket answered %s", resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}
