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
	"strconv"
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
	// inBound is the input bound reserved; clamped the output limit the budget lowered the
	// call's to (0: not lowered).
	inBound int64
	clamped int64
	// count counts output text for a cut stream (the route's tokenizer, or bytes).
	count func(string) int64

	// idBudget and idHold are the call's identity's budget and reservation (nil for the
	// sandbox's own calls): every call is charged to both.
	idBudget *Budget
	idHold   *Hold
}

// serveCall is one model call: parse → route → reserve → key → dispatch → pass through →
// settle → audit.
func (p *Proxy) serveCall(w http.ResponseWriter, r *http.Request, ep endpoint) {
	x := &exchange{p: p, ep: ep, start: p.now()}
	var identity string
	var iderr *apiError
	x.table, identity, iderr = p.tableFor(r)
	x.ev = audit.Event{Kind: audit.KindLLM, Decision: audit.DecisionAllow, Method: r.Method, Path: r.URL.Path,
		Client: r.RemoteAddr, Policy: x.table.pol.Name(), Identity: identity}
	defer x.finish()
	if iderr != nil {
		x.refuse(w, iderr, policy.ReasonIdentityUnknown)
		return
	}

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
		var reason policy.Reason
		if c, aerr, reason = translateCall(c, rt, x.start.Unix()); aerr != nil {
			x.refuse(w, aerr, reason)
			return
		}
		x.ev.Detail = fmt.Sprintf("translated %s to %s", c.tr.caller, c.tr.provider)
		w.Header().Set("X-Airlock-Translated", c.tr.caller.String()+" -> "+c.tr.provider.String())
	}
	c.raw = nil // parsed (and translated): not held for the rest of the call
	limit, inject, aerr := c.outputLimit(rt)
	if aerr != nil {
		x.refuse(w, aerr, policy.ReasonOutputCap)
		return
	}
	if ep != epCountTokens {
		granted, ok := x.reserve(w, c, rt, limit)
		if !ok {
			return
		}
		if granted < limit {
			c.clamped, x.clamped, limit = true, granted, granted
			x.ev.OutputClamped = granted
			w.Header().Set("X-Airlock-Output-Clamped", strconv.FormatInt(granted, 10))
		}
	}
	if !x.recordDecision(w) { // write-before-respond (record.go)
		return
	}
	ctx, cancel := context.WithCancel(callContext(r, c))
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
	if x.failed(ctx, w, r, at) {
		return
	}
	defer at.resp.Body.Close()
	x.pass(w, c, at, cancel, limit, func() bool { return r.Context().Err() != nil })
}

// failed answers a call that got no answer from any provider and reports whether it did.
func (x *exchange) failed(ctx context.Context, w http.ResponseWriter, r *http.Request, at attempt) bool {
	switch {
	case at.keyErr != nil:
		// Fail closed: nothing was sent. The error names the secret, never a value.
		x.ev.Error = at.keyErr.Error()
		x.fail(w, &apiError{status: http.StatusServiceUnavailable, code: "provider_key_unavailable", openaiType: "server_error",
			message: fmt.Sprintf("airlock: the key of provider %q is not available (secret %q); nothing was sent", at.route.provider, at.route.apiKey)})
		return true
	case at.err != nil:
		x.ev.Error = at.err.Error()
		if r.Context().Err() != nil && x.ep != epCountTokens {
			// The caller left before an answer came: the provider may have had the call and
			// bill it, so it costs its reservation, marked estimated.
			x.chargeReservation()
		}
		x.fail(w, upstreamFailure(at.err, ctx))
		return true
	}
	return false
}

// callContext is the context a call is sent upstream under. A stream follows its caller: one
// who hangs up cancels it, and it is charged what was forwarded (settleStream). A call
// answered whole is sent detached from its caller: once the provider has it, the provider
// bills it whether or not the caller waits, so airlock waits for the answer (bounded by the
// provider's timeouts) to charge what the provider reports.
func callContext(r *http.Request, c *call) context.Context {
	if c.stream {
		return r.Context()
	}
	return context.WithoutCancel(r.Context())
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

// reserve reserves the call's worst case (cost.go) and returns the output limit granted
// per choice: limit, or less when the lifetime caps leave less. The input is bounded by its
// bytes first; only when that does not fit is its text counted with the model's tokenizer.
// The price is the dearest among the model and its fallbacks.
func (x *exchange) reserve(w http.ResponseWriter, c *call, rt *route, limit int64) (int64, bool) {
	caps := x.table.budget
	cands := rt.candidates()
	ask := Ask{Out: limit, Strict: true}
	var bounds []*costBound
	for _, cand := range cands {
		b := boundFor(c, cand)
		if b.unboundable != "" && (caps.Tokens > 0 || caps.USD > 0) {
			x.refuse(w, &apiError{status: policy.ReasonUnboundedCost.HTTPStatus(), code: "unbounded_cost", openaiType: "invalid_request_error", deny: true, final: true,
				message: "airlock: this call's cost cannot be bounded, and the sandbox has a hard budget (llm.budget): " + b.unboundable}, policy.ReasonUnboundedCost)
			return 0, false
		}
		bounds = append(bounds, b)
		ask.In = max(ask.In, b.bytes())
		ask.FixedOut = max(ask.FixedOut, b.fixedOut)
		ask.Choices = max(ask.Choices, b.choices)
		ask.Price.InputPerMTok = max(ask.Price.InputPerMTok, cand.price.InputPerMTok)
		ask.Price.OutputPerMTok = max(ask.Price.OutputPerMTok, cand.price.OutputPerMTok)
	}
	if limit == 0 {
		ask.Choices = 0
	}
	x.count = x.p.tok.counter(encodingFor(rt.upstream))
	if admit := x.p.cfg.Admit; admit != nil {
		if err := admit(); err != nil {
			e, reason := budgetAPIError(&BudgetError{Err: ErrBudgetExhausted, Cap: "usage", Message: err.Error()})
			x.refuse(w, e, reason)
			return 0, false
		}
	}
	hold, err := x.p.budget.Reserve(caps, ask)
	if err != nil {
		// Count the text, then let the budget lower the output limit or (a call larger
		// than the per-minute cap, bucket full) go into debt.
		ask.Strict = false
		ask.In = x.countedInput(bounds, cands)
		hold, err = x.p.budget.Reserve(caps, ask)
	}
	if err != nil {
		var be *BudgetError
		errors.As(err, &be)
		e, reason := budgetAPIError(be)
		x.refuse(w, e, reason)
		return 0, false
	}
	granted, ok := x.reserveIdentity(w, ask, hold, func() int64 { return x.countedInput(bounds, cands) })
	if !ok {
		return 0, false
	}
	hold.Out = granted
	x.hold, x.id, x.inBound = hold, newCallID(), ask.In
	x.p.cfg.Ledger.Append(Record{Kind: RecordReserve, ID: x.id, Identity: x.ev.Identity, Model: rt.name, Provider: rt.provider,
		Input: ask.In, Output: hold.Tokens - ask.In, CostNano: hold.Nano})
	return hold.Out, true
}

// countedInput is the input bound with text counted by each candidate's tokenizer (bytes
// for a model airlock has none for), the largest over the candidates.
func (x *exchange) countedInput(bounds []*costBound, cands []*route) int64 {
	var n int64
	for i, b := range bounds {
		if count := x.p.tok.counter(encodingFor(cands[i].upstream)); count != nil && cands[i].ptype == policy.ProviderOpenAI {
			n = max(n, b.counted(count))
		} else {
			n = max(n, b.bytes())
		}
	}
	return n
}

// pass hands the provider's answer to the caller: errors redacted and passed through, a
// stream event by event, anything else whole once its usage is read.
func (x *exchange) pass(w http.ResponseWriter, c *call, at attempt, cancel context.CancelFunc, limit int64, callerGone func() bool) {
	resp, rt := at.resp, at.route
	x.ev.Status = resp.StatusCode
	redact := func(b []byte) []byte { return redactKey(b, at.key) }
	var timedOut atomic.Bool
	dog := time.AfterFunc(rt.firstByte, func() { timedOut.Store(true); cancel() })
	defer dog.Stop()
	kick := func() { dog.Reset(rt.chunk) }
	copyResponseHeaders(w.Header(), resp.Header)
	x.budgetHeaders(w.Header())
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode < 300 && mt == "text/event-stream" {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		h.Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		_ = http.NewResponseController(w).Flush()
		res := pump(w, resp.Body, c, limit*max(1, c.choices), x.count, redact, x.firstToken, kick, timedOut.Load)
		x.ev.BytesDown = res.bytesDown
		x.settleStream(res, callerGone)
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
	body, aerr := c.callerBody(resp.StatusCode, body, x.start.Unix())
	if aerr != nil {
		x.ev.Error = aerr.message
		x.fail(w, aerr)
		return
	}
	x.firstToken()
	w.Header().Del("Content-Length")
	if c.tr != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := w.Write(body)
	x.ev.BytesDown = int64(n)
}

// settleStream decides what a stream costs: the usage the provider reported when it ended
// well; nothing when the provider failed it before any usage; when the caller went away
// mid-stream, the input (as reported, else its bound) plus the output counted in the events
// forwarded (upstream is cancelled as serveCall returns); otherwise the whole reservation.
// The last two are marked estimated.
func (x *exchange) settleStream(res pumpResult, callerGone func() bool) {
	m := res.meter
	switch {
	case m.done && m.u.known && res.cut == nil:
		x.in, x.out = m.u.input, m.u.output
		return
	case m.upstreamError && !m.u.known:
		return // the provider failed the call in-band before any usage: nothing billed
	case res.err != nil && callerGone() && x.hold != nil:
		x.estimated = true
		x.in, x.out = x.inBound, res.out
		if m.u.known && m.u.input > 0 {
			x.in = m.u.input
		}
		x.ev.Error = "caller went away mid-stream: " + res.err.Error()
		return
	}
	x.chargeReservation()
	if res.cut != nil {
		x.ev.Error = res.cut.message
	} else if res.err != nil {
		x.ev.Error = "stream ended early: " + res.err.Error()
	}
}

// budgetHeaders says what is left of the lifetime caps on every answer:
// X-Airlock-Budget-Remaining-Tokens (with llm.budget.tokens) and
// X-Airlock-Budget-Remaining-USD (with llm.budget.usd), after what calls in flight hold.
func (x *exchange) budgetHeaders(h http.Header) {
	caps := x.table.budget
	if caps.Tokens <= 0 && caps.USD <= 0 {
		return
	}
	st := x.p.budget.State()
	if caps.Tokens > 0 {
		h.Set("X-Airlock-Budget-Remaining-Tokens", strconv.FormatInt(max(0, caps.Tokens-st.UsedTokens-st.HeldTokens), 10))
	}
	if caps.USD > 0 {
		h.Set("X-Airlock-Budget-Remaining-USD", strconv.FormatFloat(float64(max(0, nanoCap(caps.USD)-st.UsedNano-st.HeldNano))/1e9, 'f', 6, 64))
	}
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
	x.p.metrics.denied.WithLabelValues(string(reason), x.ev.Identity).Inc()
	x.budgetHeaders(w.Header())
	e.write(w, x.ep.family())
}

// fail answers a call that was allowed but could not be completed.
func (x *exchange) fail(w http.ResponseWriter, e *apiError) {
	x.ev.Status = e.status
	x.budgetHeaders(w.Header())
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
		if x.idHold != nil {
			x.idBudget.Settle(x.idHold, x.in+x.out, nano)
		}
		p.cfg.Ledger.Append(Record{Kind: RecordSettle, ID: x.id, Identity: x.ev.Identity, Model: x.route.name, Provider: x.route.provider,
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
	id := x.ev.Identity
	p.metrics.requests.WithLabelValues(model, prov, statusLabel(x.ev.Status), id).Inc()
	if x.hold != nil {
		p.metrics.tokens.WithLabelValues(model, prov, "input", id).Add(float64(x.in))
		p.metrics.tokens.WithLabelValues(model, prov, "output", id).Add(float64(x.out))
		p.metrics.cost.WithLabelValues(model, prov, id).Add(float64(nano) / 1e9)
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
