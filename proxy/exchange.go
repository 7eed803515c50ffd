package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// origin says where an HTTP request came from and how its upstream is reached. The listener
// that read the request attaches it to the request's context.
type origin struct {
	client     string     // the client's address
	hostHeader string     // the Host header as the client sent it ("" when absent)
	headKnown  bool       // false when the raw request head could not be read (explicit listener)
	ups        *upstreams // transports to the upstream
	tunnel     *tunnel    // the intercepted tunnel the request came through, or nil
	// stream is the client's response writer when the listener wrapped it (streamWriter):
	// it flushes every write and remembers a hijacked connection (WebSocket). Nil otherwise.
	stream *streamWriter
	// h1, when set, is the fast path's upstream (h1upstream.go), used instead of ups.
	h1 *h1Upstream
	// path is how an HTTP/1.x request was read (pathStrict, pathNetHTTP); "" for HTTP/2.
	path string
	// watchClient, set by the fast path for a request with no body left to read, watches the
	// client's connection while the request is held for an approval: the context it returns
	// ends when the client goes (net/http's server does this for its own requests); stop ends
	// the watch. Nil: the request's context already does.
	watchClient func(ctx context.Context) (held context.Context, stop func())
}

// settle decides req and passes the decision through the approval stage. A miss the stage may
// hold is held only while the client is still there.
func (x *exchange) settle(r *http.Request, req policy.Request) (*policy.Policy, policy.Decision) {
	if x.unknown != nil { // the connection's identity cannot be told (identity.go)
		return x.p.decide(r.Context(), x.pol, x.unknown, req, "http")
	}
	d := x.pol.Decide(req)
	ctx := r.Context()
	if x.o.watchClient != nil && x.p.cfg.Approvals != nil && d.Reason == policy.ReasonNoRule {
		held, stop := x.o.watchClient(ctx)
		defer stop()
		ctx = held
	}
	return x.p.settle(ctx, x.pol, req, d, "http")
}

// roundTrip sends r upstream: over the fast path's own connection, or a transport for pol.
func (o *origin) roundTrip(pol *policy.Policy, r *http.Request) (*http.Response, error) {
	if o.h1 != nil {
		return o.h1.RoundTrip(r)
	}
	return o.ups.get(pol).RoundTrip(r)
}

type ctxKey int

const (
	originKey   ctxKey = iota // *origin, on requests the listeners read
	exchangeKey               // *exchange, on requests going upstream
	connKey                   // *headConn, on requests of the explicit listener
)

func withOrigin(ctx context.Context, o *origin) context.Context {
	return context.WithValue(ctx, originKey, o)
}

func originFrom(ctx context.Context) *origin {
	o, _ := ctx.Value(originKey).(*origin)
	return o
}

func exchangeFrom(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey).(*exchange)
	return x
}

// exchange is one HTTP request through the proxy, from its decision to the last byte of its
// response. It writes the request's one audit event when the response body is closed.
type exchange struct {
	p      *Proxy
	o      *origin
	pol    *policy.Policy // the policy in force when the request started
	at     time.Time      // Config.Now at the start, the audit event's time
	start  time.Time      // monotonic start, for the duration
	method string
	path   string
	host   string // URL host as the client gave it
	port   int    // effective port
	dest   string // host:port as the client asked for it
	d      policy.Decision
	reqID  string // the request's ID in its events and its response (record.go)
	up     atomic.Int64
	down   atomic.Int64
	ws     *wsUpgrade // a WebSocket handshake being forwarded (checkUpgrade), or nil

	// unknown refuses every request of a connection whose identity cannot be told (policyFor).
	unknown *policy.Decision

	// mu guards the fields below, which the transport's goroutines also set.
	mu       sync.Mutex
	status   int
	addr     string
	secrets  []string
	refusal  *policy.Decision // what denied the request, if anything did
	errText  string
	recorded bool // the request's event was written before it was answered (record)

	once sync.Once
}

// onRequest is goproxy's request hook and the first stage of every HTTP request: it decides,
// and either answers (a denial, a limit) or lets goproxy forward through the exchange.
func (p *Proxy) onRequest(r *http.Request, gctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	o := originFrom(r.Context())
	if o == nil { // a request that did not come through our listeners: fail closed
		return r, failResponse(r, policy.ReasonNotProxyRequest, "", 0)
	}
	x := &exchange{p: p, o: o, at: p.cfg.Now(), start: time.Now(),
		method: r.Method, path: r.URL.EscapedPath(), host: r.URL.Host, dest: r.URL.Host, reqID: requestID(r.Header)}
	x.pol, x.unknown = p.policyFor(o.client)
	gctx.RoundTripper = x
	return r, x.record(r, x.admit(r))
}

// admit checks the names the request carries agree, decides it, and checks its size. It
// returns the response that ends the request, or nil to forward it.
func (x *exchange) admit(r *http.Request) *http.Response {
	if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
		return x.fail(r, policy.ReasonUnsupportedScheme)
	}
	a, err := parseAuthority(r.URL.Host)
	if err != nil {
		return x.deny(r, policy.Decision{Reason: policy.ReasonInvalidHost,
			Detail: fmt.Sprintf("request target host %q is not valid", r.URL.Host)})
	}
	x.host, x.port = a.host, a.port
	if x.port == 0 {
		x.port = defaultPort(r.URL.Scheme)
	}
	x.dest = a.withPort(x.port)
	if r.URL.Opaque != "" { // "GET http:x": the request-target is not a path the policy can match
		return x.deny(r, policy.Decision{Reason: policy.ReasonInvalidPath,
			Detail: "the request target has no path"})
	}
	h, err := policy.NormalizeHost(a.host)
	if err != nil {
		return x.deny(r, policy.Decision{Reason: policy.ReasonInvalidHost,
			Detail: fmt.Sprintf("host %q is not a valid host name or address", a.host)})
	}
	if detail := x.o.hostMismatch(h.Name, x.port); detail != "" {
		return x.deny(r, policy.Decision{Reason: policy.ReasonHostMismatch, Host: h.Name, Port: x.port, Detail: detail})
	}
	req := policy.Request{Scheme: r.URL.Scheme, Host: a.host, Port: x.port,
		Method: r.Method, Path: pathAndQuery(r.URL), OverrideHeader: overrideHeader(r.Header)}
	x.pol, x.d = x.settle(r, req)
	if !x.d.Allowed() {
		return x.deny(r, x.d)
	}
	if d, ok := x.checkUpgrade(r); !ok {
		return x.deny(r, d)
	}
	if d, ok := x.checkFormOverride(r); !ok {
		return x.deny(r, d)
	}
	if r.ContentLength > x.p.cfg.MaxRequestBodyBytes {
		return x.fail(r, policy.ReasonBodyLimit)
	}
	return nil
}

// maxFormCheck bounds the form body read to look for a method override.
const maxFormCheck = 1 << 20

// checkFormOverride refuses, where the allowing entry limits methods (in enforce mode), a
// form body holding a _method parameter: Rails, Laravel and Symfony run that method instead.
// It reads an application/x-www-form-urlencoded body (up to maxFormCheck, more is refused)
// and puts it back; a multipart body is scanned as it goes upstream (multipartScanner).
func (x *exchange) checkFormOverride(r *http.Request) (policy.Decision, bool) {
	if !x.d.LimitsMethods || x.d.WouldDeny || r.Body == nil || r.Body == http.NoBody {
		return policy.Decision{}, true
	}
	refuse := func(detail string) (policy.Decision, bool) {
		return policy.Decision{Verdict: policy.Deny, Reason: policy.ReasonMethodOverride, Rule: x.d.Rule,
			Host: x.d.Host, Port: x.d.Port, Detail: detail}, false
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		mt = strings.ToLower(r.Header.Get("Content-Type"))
	}
	switch {
	case strings.Contains(mt, "multipart/"):
		if params["boundary"] == "" {
			return refuse("the multipart body names no boundary, so it cannot be checked for a method override")
		}
		r.Body = newMultipartScanner(r.Body, params["boundary"], x.d.Rule)
		return policy.Decision{}, true
	case !strings.Contains(mt, "x-www-form-urlencoded"):
		return policy.Decision{}, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxFormCheck+1))
	switch {
	case err != nil:
		return refuse("the form body could not be read to check it for a method override")
	case len(body) > maxFormCheck:
		return refuse(fmt.Sprintf("rule %q limits methods and the form body is over %d bytes, too large to check for a method override", x.d.Rule, maxFormCheck))
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{bytes.NewReader(body), r.Body}
	if name := policy.FormMethodOverride(string(body)); name != "" {
		return refuse(fmt.Sprintf("rule %q limits methods and the form body carries method override %q (a server may run another method than %s)",
			x.d.Rule, name, r.Method))
	}
	return policy.Decision{}, true
}

// pathAndQuery is the request's path with its query, which the policy reads for
// method-override parameters.
func pathAndQuery(u *url.URL) string {
	if u.RawQuery == "" && !u.ForceQuery {
		return u.EscapedPath()
	}
	return u.EscapedPath() + "?" + u.RawQuery
}

// overrideHeader names a method-override header h holds (policy.IsMethodOverrideHeader),
// or "". The first in sorted order is named, so the audit detail is stable.
func overrideHeader(h http.Header) string {
	found := ""
	for k := range h {
		if policy.IsMethodOverrideHeader(k) && (found == "" || k < found) {
			found = k
		}
	}
	return found
}

// hostMismatch says why the request's Host header does not name host:port, or "".
func (o *origin) hostMismatch(host string, port int) string {
	switch {
	case !o.headKnown:
		return "the request head could not be read to check its Host header"
	case o.hostHeader == "":
		return "" // HTTP/1.0 without Host: the URL (or tunnel) alone names the destination
	}
	return agree(host, port, o.hostHeader)
}

// RoundTrip is the exchange's upstream stage (goproxy.RoundTripper): inject credentials,
// forward over a transport that dials only checked addresses, and turn every failure into
// a JSON response. It never returns an error, so goproxy never writes one of its own.
func (x *exchange) RoundTrip(r *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
	if x.p.cfg.Injector == nil && len(x.d.Secrets) > 0 {
		// Fail closed: the rule says this request needs credentials, and sending it without
		// them (or with whatever the sandbox put in the header) is never right.
		x.setError(fmt.Errorf("inject credentials %v: %w", x.d.Secrets, errNoInjector))
		return x.fail(r, policy.ReasonInjectionFailed), nil
	}
	if inj := x.p.cfg.Injector; inj != nil {
		if err := inj.Inject(r, x.d); err != nil {
			if den, ok := asRefusal(err); ok {
				return x.deny(r, x.refusalDecision(den)), nil
			}
			x.setError(fmt.Errorf("inject credentials: %w", err))
			return x.fail(r, policy.ReasonInjectionFailed), nil
		}
		x.mu.Lock()
		x.secrets = x.d.Secrets
		x.mu.Unlock()
	}
	if x.ws != nil {
		if resp := x.prepareUpgrade(r); resp != nil {
			return resp, nil
		}
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{rc: r.Body, limit: x.p.cfg.MaxRequestBodyBytes, n: &x.up, total: x.p.metrics.bytesOf(x.pol.IdentityName()).up}
	}
	ctx := context.WithValue(r.Context(), exchangeKey, x)
	if x.o.h1 == nil { // the fast path's upstream records its address itself
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: x.gotConn})
	}
	resp, err := x.o.roundTrip(x.pol, r.WithContext(ctx))
	if err != nil {
		return x.upstreamFailure(r, err), nil
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return x.switchProtocols(r, resp), nil
	}
	if f, ok := x.p.cfg.Injector.(ResponseFilter); ok {
		x.mu.Lock()
		injected := len(x.secrets) > 0
		x.mu.Unlock()
		filtered, err := f.FilterResponse(resp, injected)
		if err != nil { // fail closed: a response that could not be scrubbed never reaches the sandbox
			if ref, ok := asRefusal(err); ok {
				return x.deny(r, x.refusalDecision(ref)), nil
			}
			x.setError(fmt.Errorf("filter response: %w", err))
			return x.deny(r, policy.Decision{Reason: policy.ReasonResponseUndecodable, Rule: x.d.Rule, Host: x.d.Host, Port: x.d.Port,
				Detail: "the response could not be scrubbed of secrets"}), nil
		}
		resp = filtered
	}
	if decision, _ := x.outcome(); decision == audit.DecisionReport {
		resp.Header.Set(headerDecision, audit.DecisionReport)
	}
	return x.respond(resp), nil
}

// gotConn records the address and report status of the upstream connection a request got,
// whether freshly dialled or reused.
func (x *exchange) gotConn(info httptrace.GotConnInfo) {
	c := info.Conn
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	cc, ok := c.(*checkedConn)
	if !ok {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.addr = cc.addr.String()
}

// upstreamFailure maps a transport error to the client's response: a refused address is a
// denial, an oversized body 413, a timeout 504, anything else 502.
func (x *exchange) upstreamFailure(r *http.Request, err error) *http.Response {
	if ref, ok := asRefusal(err); ok { // a placeholder met in the request body
		return x.deny(r, x.refusalDecision(ref))
	}
	if d, ok := asDenial(err, x.d.Rule); ok {
		return x.deny(r, d)
	}
	if errors.Is(err, errBodyTooLarge) {
		return x.fail(r, policy.ReasonBodyLimit)
	}
	x.setError(err)
	switch {
	case errors.Is(err, egress.ErrUpstreamProxy): // before timeouts: the proxy is what failed
		return x.fail(r, policy.ReasonUpstreamProxy)
	case isTimeout(err):
		return x.fail(r, policy.ReasonTimeout)
	case errors.Is(err, egress.ErrResolve):
		return x.fail(r, policy.ReasonResolveFailed)
	}
	return x.fail(r, policy.ReasonConnectFailed)
}

// deny answers the request with the 403 for d.
func (x *exchange) deny(r *http.Request, d policy.Decision) *http.Response {
	x.mu.Lock()
	x.refusal = &d
	x.mu.Unlock()
	return x.respond(denyResponse(r, d, x.pol, x.host, x.port))
}

// fail answers the request with an error other than a denial.
func (x *exchange) fail(r *http.Request, reason policy.Reason) *http.Response {
	host := x.d.Host
	if host == "" {
		host = x.host
	}
	return x.respond(failResponse(r, reason, host, x.port))
}

// respond records resp's status and counts its body; closing the body ends the exchange.
// Upgrade, a hop-by-hop header, is dropped: only a relayed 101 (switchProtocols, which
// does not come here) may make goproxy take the connection over for WebSocket.
func (x *exchange) respond(resp *http.Response) *http.Response {
	resp.Header.Del("Upgrade")
	x.mu.Lock()
	x.status = resp.StatusCode
	x.mu.Unlock()
	resp.Header.Set(headerAirlockRequestID, x.reqID)
	resp.Body = &countingBody{rc: resp.Body, limit: -1, n: &x.down, total: x.p.metrics.bytesOf(x.pol.IdentityName()).down, onClose: x.finish}
	return resp
}

func (x *exchange) setError(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.errText = err.Error()
}

// outcome is the audit decision and the policy decision behind it.
func (x *exchange) outcome() (string, policy.Decision) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.refusal != nil:
		return audit.DecisionDeny, *x.refusal
	case x.d.WouldDeny:
		return audit.DecisionReport, x.d
	}
	return audit.DecisionAllow, x.d
}

// finish writes the exchange's audit event and metrics, once.
func (x *exchange) finish() {
	x.once.Do(func() {
		x.p.metrics.countPath(x.o.path) // before the event: a test that saw the event sees the count
		decision, d := x.outcome()
		ev := x.event(decision, d)
		x.mu.Lock()
		recorded := x.recorded
		x.mu.Unlock()
		if !recorded { // answered at admission: its event was written then (record)
			x.p.cfg.Audit.Log(ev)
		}
		x.p.metrics.observe(kindHTTP, decision, d.Rule, ev.Identity, ev.Duration)
		if t := x.o.tunnel; t != nil {
			t.up.Add(ev.BytesUp)
			t.down.Add(ev.BytesDown)
			t.mu.Lock()
			if t.addr == "" {
				t.addr = ev.Addr // the tunnel's event names an address it reached
			}
			t.mu.Unlock()
		}
	})
}
