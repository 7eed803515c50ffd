package llmproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// The provider base URLs are destinations of the sidecar itself, not of the sandbox: they
// need no egress rule (the sandbox never connects to them; the kernel and the proxy keep
// denying it). They go through the sidecar's operator dial path (egress.Operator: the
// upstream proxy unless exempted, never a proxy from the environment), under the SSRF rule
// the egress proxy follows too: a provider name is resolved once, and an answer holding any
// internal address (policy.ClassifyAddr) is refused whole unless the provider names the range
// — allowInternal names every range, a base URL that is an IP address names that address.
// The sidecar's own listeners are never dialled.

// transports keeps one http.Transport per provider setting, so connections are reused.
type transports struct {
	op *egress.Operator

	// mu guards byKey.
	mu    sync.Mutex
	byKey map[string]*http.Transport
}

// get returns the transport for route r's provider settings.
func (t *transports) get(r *route) *http.Transport {
	key := fmt.Sprintf("%s|%t|%s|%s", r.base.Host, r.allowInternal, r.connect, r.firstByte)
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr, ok := t.byKey[key]; ok {
		return tr
	}
	tr := &http.Transport{
		Proxy:                 nil, // never HTTP(S)_PROXY: the operator path decides
		DialContext:           t.dialer(providerRanges(r), r.connect),
		TLSClientConfig:       t.op.TLSConfig(),
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   r.connect,
		ResponseHeaderTimeout: r.firstByte,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true, // usage is read from the body; Accept-Encoding is identity
	}
	t.byKey[key] = tr
	return tr
}

// closeIdle closes idle connections of every transport.
func (t *transports) closeIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range t.byKey {
		tr.CloseIdleConnections()
	}
}

// providerRanges are the internal ranges route r's provider names: every range with
// allowInternal, the address of a base URL that is an IP address, else none.
func providerRanges(r *route) egress.Ranges {
	if r.allowInternal {
		return egress.AllRanges()
	}
	if h, err := policy.NormalizeHost(r.base.Hostname()); err == nil && h.IsIP() {
		a := h.Addr.Unmap()
		return egress.Ranges{netip.PrefixFrom(a, a.BitLen())}
	}
	return nil
}

// dialer resolves once, checks every address under ranges and dials only a checked address,
// within timeout (name resolution included, as net.Dialer's Timeout). A refused destination
// is returned as ErrInternalAddress (wrapping the *egress.Denial).
func (t *transports) dialer(ranges egress.Ranges, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := t.op.DialContext(ranges)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c, err := dial(ctx, network, addr)
		var den *egress.Denial
		switch {
		case errors.As(err, &den) && errors.Is(err, egress.ErrInternalAddress):
			return nil, fmt.Errorf("%w: %w; set allowInternal on the provider for a self-hosted server", ErrInternalAddress, den)
		case errors.As(err, &den):
			return nil, fmt.Errorf("%w: %w", ErrInternalAddress, den)
		case err != nil:
			return nil, fmt.Errorf("connect to provider %s: %w", addr, err)
		}
		return c, nil
	}
}

// forwardedRequestHeaders are the caller headers passed to a provider; everything else,
// Authorization and x-api-key above all, is dropped.
var forwardedRequestHeaders = []string{
	"Anthropic-Version", "Anthropic-Beta", "Openai-Organization", "Openai-Project", "Openai-Beta",
	"Content-Type", "Accept", "User-Agent", "Idempotency-Key",
}

// passedResponseHeaders are the provider headers passed back to the caller.
var passedResponseHeaders = []string{
	"Content-Type", "Retry-After", "Request-Id", "X-Request-Id", "Openai-Processing-Ms", "Openai-Version",
}

// passedResponsePrefixes pass rate-limit information back (no keys are in these).
var passedResponsePrefixes = []string{"X-Ratelimit-", "Anthropic-Ratelimit-"}

// newUpstreamRequest builds the request to route r, with the provider key set the
// provider's way.
func newUpstreamRequest(ctx context.Context, in *http.Request, r *route, ep endpoint, body []byte, key string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.upstreamURL(ep.path()), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build provider request: %w", err)
	}
	for _, h := range forwardedRequestHeaders {
		if !headerFor(h, r.ptype) {
			continue
		}
		if v := in.Header.Values(h); len(v) > 0 {
			req.Header[h] = slices.Clone(v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "identity")
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "airlock")
	}
	switch {
	case r.ptype == policy.ProviderAnthropic:
		if req.Header.Get("Anthropic-Version") == "" {
			req.Header.Set("Anthropic-Version", "2023-06-01")
		}
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
	case key != "":
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return req, nil
}

// headerFor reports whether forwarded header h belongs to the API of a provider of type
// pt: anthropic-* headers go to Anthropic only, openai-* ones to OpenAI-style providers only
// (a translated call's caller sends the other API's).
func headerFor(h string, pt policy.ProviderType) bool {
	switch {
	case strings.HasPrefix(h, "Anthropic-"):
		return pt == policy.ProviderAnthropic
	case strings.HasPrefix(h, "Openai-"):
		return pt != policy.ProviderAnthropic
	}
	return true
}

// copyResponseHeaders passes the allowed provider headers to the caller.
func copyResponseHeaders(dst, src http.Header) {
	for _, h := range passedResponseHeaders {
		if v := src.Values(h); len(v) > 0 {
			dst[h] = slices.Clone(v)
		}
	}
	for k, v := range src {
		for _, p := range passedResponsePrefixes {
			if strings.HasPrefix(k, p) {
				dst[k] = slices.Clone(v)
			}
		}
	}
}

// retryable reports whether a provider status may be retried (before the first byte).
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// attempt is the outcome of dispatch.
type attempt struct {
	resp  *http.Response
	route *route // the route that answered
	key   string // its key, for redaction
	err   error  // set when no response was had at all
	// keyErr is set when a key could not be had (fail closed: nothing was sent).
	keyErr   error
	attempts int
}

// dispatch sends the call to r, retrying 429 and 5xx answers and connection failures with
// backoff, then to each fallback; everything happens before the first byte reaches the
// caller. The last answer (or error) is returned when every try failed.
func (p *Proxy) dispatch(ctx context.Context, in *http.Request, c *call, primary *route, limit int64, inject bool) attempt {
	var last attempt
	for _, r := range primary.candidates() {
		key := ""
		if r.apiKey != "" {
			v, err := p.cfg.Keys.Value(ctx, r.apiKey)
			if err == nil && v == "" {
				err = errors.New("empty value")
			}
			if err != nil {
				if last.resp != nil {
					break // answer with the provider's last error rather than a key failure
				}
				return attempt{route: r, keyErr: fmt.Errorf("provider key %q: %w", r.apiKey, err), attempts: last.attempts}
			}
			key = v
		}
		body := c.upstreamBody(r, limit, inject)
		tr := p.transports.get(r)
		for try := 0; try <= r.retries; try++ {
			if last.resp != nil {
				drain(last.resp)
			}
			req, err := newUpstreamRequest(ctx, in, r, c.ep, body, key)
			if err != nil {
				return attempt{route: r, err: err, attempts: last.attempts}
			}
			resp, err := tr.RoundTrip(req)
			last = attempt{resp: resp, route: r, key: key, err: err, attempts: last.attempts + 1}
			if err == nil && !retryable(resp.StatusCode) {
				return last
			}
			if ctx.Err() != nil || errors.Is(err, ErrInternalAddress) {
				return last
			}
			if try < r.retries && !p.wait(ctx, try, resp) {
				return last
			}
		}
	}
	return last
}

// wait sleeps before retry number try+1: exponential backoff with jitter, or the provider's
// Retry-After when longer, capped by MaxRetryWait. It returns false when ctx ended first.
func (p *Proxy) wait(ctx context.Context, try int, resp *http.Response) bool {
	d := p.backoff << try
	d += rand.N(d + 1)
	if resp != nil {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && time.Duration(s)*time.Second > d {
			d = time.Duration(s) * time.Second
		}
	}
	d = min(d, p.maxRetryWait)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// drain discards a response that is not passed on, so its connection can be reused.
func drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}
