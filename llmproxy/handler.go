package llmproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// exchange is one call on its way through serveCall: what the audit event, the metrics and
// the ledger get at the end.
type exchange struct {
	p     *Proxy
	ep    endpoint
	start time.Time
	ev    audit.Event
	table *routeTable
	route *route // the route that answered (a fallback, perhaps)
	hold  *Hold
	id    string
	ttft  time.Duration
	// charge is what the call costs: the real usage, or the reservation when unknown.
	in, out   int64
	estimated bool
}

// serveCall is one model call: parse → route → reserve → key → dispatch → pass through →
// settle → audit.
func (p *Proxy) serveCall(w http.ResponseWriter, r *http.Request, ep endpoint) {
	x := &exchange{p: p, ep: ep, start: p.now(), table: p.table()}
	x.ev = audit.Event{Kind: audit.KindLLM, Decision: audit.DecisionAllow, Method: r.Method, Path: r.URL.Path,
		Client: r.RemoteAddr, Policy: x.table.pol.Name()}
	defer x.finish()

	c, aerr := p.readCall(w, r, ep)
	if aerr != nil {
		x.refuse(w, aerr, policy.ReasonInvalidRequest)
		return
	}
	x.ev.Model = c.model
	x.ev.BytesUp = c.inputBytes
	rt, ok := x.table.models[c.model]
	if !ok {
		x.refuse(w, notAllowed(x.table, c.model), policy.ReasonModelNotAllowed)
		return
	}
	x.route = rt
	x.ev.Provider = rt.provider
	if rt.family() != ep.family() {
		x.refuse(w, wrongAPI(rt, ep), policy.ReasonWrongAPI)
		return
	}
	limit, inject, aerr := c.outputLimit(rt)
	if aerr != nil {
		x.refuse(w, aerr, policy.ReasonOutputCap)
		return
	}
	if ep != epCountTokens && !x.reserve(w, c, rt, limit) {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	at := p.dispatch(ctx, r, c, rt, limit, inject)
	if at.attempts > 1 {
		p.metrics.retries.WithLabelValues(rt.provider).Add(float64(at.attempts - 1))
	}
	if at.route != nil {
		x.route = at.route
		x.ev.Provider = at.route.provider
		x.ev.Destination = at.route.base.Host
	}
	if x.table.logPrompts {
		x.ev.Prompt = redactPrompt(c.promptText(), at.key)
	}
	switch {
	case at.keyErr != nil:
		// Fail closed: nothing was sent. The error names the secret, never a value.
		x.ev.Error = at.keyErr.Error()
		x.fail(w, &apiError{status: http.StatusServiceUnavailable, code: "provider_key_unavailable", openaiType: "server_error",
			message: fmt.Sprintf("airlock: the key of provider %q is not available (secret %q); nothing was sent", at.route.provider, at.route.apiKey)})
		return
	case at.err != nil:
		x.ev.Error = at.err.Error()
		x.fail(w, upstreamFailure(at.err, ctx))
		return
	}
	defer at.resp.Body.Close()
	x.pass(w, c, at, cancel, limit)
}

// readCall reads and parses the request body.
func (p *Proxy) readCall(w http.ResponseWriter, r *http.Request, ep endpoint) (*call, *apiError) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: "request_too_large", openaiType: "invalid_request_error",
				message: fmt.Sprintf("airlock: request body over %d bytes", p.maxBody)}
		}
		return nil, badRequest("airlock: could not read the request body")
	}
	return parseCall(ep, raw)
}

// reserve reserves the call's worst case: input bytes (a token is never shorter than the
// byte of text it encodes, and the JSON around the text outweighs per-message tokens) plus
// the output limit, at the dearest price among the model and its fallbacks.
func (x *exchange) reserve(w http.ResponseWriter, c *call, rt *route, limit int64) bool {
	tokens := c.inputBytes + limit
	var nano int64
	for _, cand := range rt.candidates() {
		nano = max(nano, costNano(cand.price, c.inputBytes, limit))
	}
	hold, err := x.p.budget.Reserve(x.table.budget, tokens, nano)
	if err != nil {
		var be *BudgetError
		errors.As(err, &be)
		e, reason := budgetAPIError(be)
		x.refuse(w, e, reason)
		return false
	}
	x.hold, x.id = hold, newCallID()
	x.p.cfg.Ledger.Append(Record{Kind: RecordReserve, ID: x.id, Sandbox: "", Model: rt.name, Provider: rt.provider,
		Input: c.inputBytes, Output: limit, CostNano: nano})
	return true
}

// pass hands the provider's answer to the caller: errors redacted and passed through, a
// stream event by event, anything else whole once its usage is read.
func (x *exchange) pass(w http.ResponseWriter, c *call, at attempt, cancel context.CancelFunc, limit int64) {
	resp, rt := at.resp, at.route
	x.ev.Status = resp.StatusCode
	redact := func(b []byte) []byte { return redactKey(b, at.key) }
	var timedOut atomic.Bool
	dog := time.AfterFunc(rt.firstByte, func() { timedOut.Store(true); cancel() })
	defer dog.Stop()
	kick := func() { dog.Reset(rt.chunk) }
	copyResponseHeaders(w.Header(), resp.Header)
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode < 300 && mt == "text/event-stream" {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		h.Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		_ = http.NewResponseController(w).Flush()
		res := pump(w, resp.Body, c, limit, redact, x.firstToken, kick, timedOut.Load)
		x.ev.BytesDown = res.bytesDown
		switch {
		case res.meter.done && res.meter.u.known && res.cut == nil:
			x.in, x.out = res.meter.u.input, res.meter.u.output
		case res.meter.upstreamError && !res.meter.u.known:
			// The provider failed the call in-band before any usage: nothing billed.
		default:
			x.chargeReservation()
			if res.cut != nil {
				x.ev.Error = res.cut.message
			} else if res.err != nil {
				x.ev.Error = "stream ended early: " + res.err.Error()
			}
		}
		return
	}
	body, err := io.ReadAll(io.LimitReader(&kickReader{r: resp.Body, kick: kick}, maxResponseBytes))
	if err != nil {
		x.ev.Error = "read provider answer: " + err.Error()
		if resp.StatusCode < 300 {
			x.chargeReservation()
		}
		x.fail(w, upstreamFailure(err, contextFor(timedOut.Load())))
		return
	}
	if resp.StatusCode >= 300 {
		body = redact(body)
		x.ev.Error = fmt.Sprintf("provider answered %d", resp.StatusCode)
	} else if u := bodyUsage(body); u.known {
		x.in, x.out = u.input, u.output
	} else if c.ep != epCountTokens {
		x.chargeReservation()
	}
	x.firstToken()
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	n, _ := w.Write(body)
	x.ev.BytesDown = int64(n)
}

// kickReader calls kick after every read (the between-chunk watchdog).
type kickReader struct {
	r    io.Reader
	kick func()
}

func (k *kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	k.kick()
	return n, err
}

// contextFor lets upstreamFailure tell a timeout from another failure.
func contextFor(timedOut bool) context.Context {
	if timedOut {
		ctx, cancel := context.WithDeadline(context.Background(), time.Time{})
		cancel()
		return ctx
	}
	return context.Background()
}

// firstToken records the time to first token once.
func (x *exchange) firstToken() {
	if x.ttft == 0 {
		x.ttft = max(x.p.now().Sub(x.start), time.Nanosecond)
	}
}

// chargeReservation charges the whole reservation: the usage is unknown.
func (x *exchange) chargeReservation() {
	if x.hold == nil {
		return
	}
	x.estimated = true
	x.in, x.out = x.hold.Tokens, 0
}

// refuse answers a call airlock itself denies (model, budget, bad request).
func (x *exchange) refuse(w http.ResponseWriter, e *apiError, reason policy.Reason) {
	x.ev.Decision, x.ev.Reason, x.ev.Detail, x.ev.Status = audit.DecisionDeny, string(reason), e.message, e.status
	x.p.metrics.denied.WithLabelValues(string(reason)).Inc()
	e.write(w, x.ep.family())
}

// fail answers a call that was allowed but could not be completed.
func (x *exchange) fail(w http.ResponseWriter, e *apiError) {
	x.ev.Status = e.status
	e.write(w, x.ep.family())
}

// finish settles the reservation, writes the ledger's settle record, the audit event and
// the metrics.
func (x *exchange) finish() {
	p := x.p
	x.ev.Duration = p.now().Sub(x.start)
	var nano int64
	if x.route != nil {
		if x.estimated {
			nano = x.hold.Nano
		} else {
			nano = costNano(x.route.price, x.in, x.out)
		}
	}
	if x.hold != nil {
		p.budget.Settle(x.hold, x.in+x.out, nano)
		p.cfg.Ledger.Append(Record{Kind: RecordSettle, ID: x.id, Model: x.route.name, Provider: x.route.provider,
			Input: x.in, Output: x.out, CostNano: nano, Status: x.ev.Status, Estimated: x.estimated})
		p.updateRemaining(x.table)
	}
	x.ev.InputTokens, x.ev.OutputTokens, x.ev.CostUSD = x.in, x.out, float64(nano)/1e9
	p.cfg.Audit.Log(x.ev)
	if x.ev.Error != "" && x.ev.Decision == audit.DecisionAllow {
		// The error text never holds a key (keys are redacted from provider bodies, and
		// airlock's own messages name secrets, not values) nor the prompt.
		p.log.WithFields(map[string]any{"model": x.ev.Model, "provider": x.ev.Provider, "status": x.ev.Status,
			"error": x.ev.Error}).Warn("model call failed")
	}
	if x.route == nil {
		return // an unknown model: no label of the policy to count it under
	}
	model, prov := x.route.name, x.route.provider
	p.metrics.requests.WithLabelValues(model, prov, statusLabel(x.ev.Status)).Inc()
	if x.hold != nil {
		p.metrics.tokens.WithLabelValues(model, prov, "input").Add(float64(x.in))
		p.metrics.tokens.WithLabelValues(model, prov, "output").Add(float64(x.out))
		p.metrics.cost.WithLabelValues(model, prov).Add(float64(nano) / 1e9)
	}
	p.metrics.latency.WithLabelValues(model, prov).Observe(x.ev.Duration.Seconds())
	if x.ttft > 0 {
		p.metrics.ttft.WithLabelValues(model, prov).Observe(x.ttft.Seconds())
	}
}

// notAllowed is the answer for a model the policy does not list, naming the allowed ones.
func notAllowed(t *routeTable, model string) *apiError {
	allowed := "none (the policy lists no models)"
	if len(t.names) > 0 {
		allowed = strings.Join(t.names, ", ")
	}
	return &apiError{status: policy.ReasonModelNotAllowed.HTTPStatus(), code: "model_not_found", openaiType: "invalid_request_error", deny: true,
		message: fmt.Sprintf("airlock: model %q is not allowed by policy %q; allowed models: %s", model, t.pol.Name(), allowed)}
}

// wrongAPI is the answer for a model called through the other API.
func wrongAPI(rt *route, ep endpoint) *apiError {
	want := "the OpenAI-compatible endpoints (/v1/chat/completions, /v1/responses, ...)"
	if rt.family() == familyAnthropic {
		want = "the Anthropic Messages API (/v1/messages)"
	}
	return badRequest(fmt.Sprintf("airlock: model %q (provider %q) is served through %s, not %s", rt.name, rt.provider, want, ep.path()))
}

// upstreamFailure maps a failure to reach or read the provider to 502 or 504.
func upstreamFailure(err error, ctx context.Context) *apiError {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || isTimeout(err) {
		return &apiError{status: http.StatusGatewayTimeout, code: "upstream_timeout", openaiType: "server_error",
			message: "airlock: the provider did not answer in time"}
	}
	msg := "airlock: the provider could not be reached"
	if errors.Is(err, ErrInternalAddress) {
		msg += ": " + err.Error()
	}
	return &apiError{status: http.StatusBadGateway, code: "upstream_unreachable", openaiType: "server_error", message: msg}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// newCallID returns a random call ID for the ledger.
func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
