package credentials

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// RefusalError is an Inject error that denies the request (403) rather than failing it: a
// placeholder where it may not go, or injection into cleartext http. It wraps ErrMisuse or
// ErrCleartext. Its text names secrets, never values.
type RefusalError struct {
	reason policy.Reason
	secret string
	err    error
}

func (e *RefusalError) Error() string { return e.err.Error() }
func (e *RefusalError) Unwrap() error { return e.err }

// DenyReason is the reason code the proxy denies the request with.
func (e *RefusalError) DenyReason() policy.Reason { return e.reason }

// Secret names the secret involved ("" when the placeholder names no known secret).
func (e *RefusalError) Secret() string { return e.secret }

// placeholder spellings that are looked for: raw, and with the colon percent-encoded.
var placeholderMarks = []string{PlaceholderPrefix, "airlock-placeholder%3A", "airlock-placeholder%3a"}

// Inject implements the proxy's Injector: it refuses placeholders where the allowing rule
// does not bind them, refuses injection into cleartext http unless the rule allows it,
// sets the rule's inject headers (replacing what the sandbox sent) and swaps the bound
// secrets' placeholders in the rule's placeholderIn locations. Errors: a *RefusalError
// (deny), or one wrapping ErrUnavailable (503, fail closed).
func (b *Broker) Inject(r *http.Request, d policy.Decision) error {
	pol, ok := decidedBy(b.cfg.Policy.Current(), d)
	if !ok {
		return fmt.Errorf("identity %q is no longer in the policy: %w", d.Identity, ErrUnavailable)
	}
	var rule policy.Rule
	// Only an intercepting rule (inject or http entries) can have inject entries.
	if d.Rule != "" && d.Intercept && d.Allowed() && !d.WouldDeny {
		rule, _ = pol.Rule(d.Rule)
	}
	bound := d.Secrets
	if d.WouldDeny {
		bound = nil
	}
	if len(bound) > 0 && r.URL.Scheme != "https" && !rule.AllowCleartext {
		return b.refuse(r, d, policy.ReasonCredentialCleartext, bound[0], fmt.Errorf(
			"rule %q injects %s but the request is cleartext http (set allowCleartext: true on the rule to allow it): %w",
			d.Rule, strings.Join(bound, ", "), ErrCleartext))
	}
	values := make(map[string]string, len(bound))
	var secrets map[string]policy.Secret
	if len(bound) > 0 {
		secrets = b.secretsOf(pol)
	}
	for _, name := range bound {
		v, err := b.resolve(r.Context(), name, secrets[name])
		if err != nil {
			b.metrics.failures.WithLabelValues(name).Inc()
			b.auditFailure(r, d, name, err)
			return err
		}
		values[name] = v
	}
	for _, in := range rule.Inject {
		v, err := in.Expand(func(name string) (string, error) { return values[name], nil })
		if err != nil {
			return fmt.Errorf("inject header %s: %w: %w", in.Header, err, ErrUnavailable)
		}
		r.Header.Del(in.Header)
		r.Header.Set(in.Header, v)
		if len(bound) > 0 {
			b.learnInjected(v)
		}
	}
	locs := rule.PlaceholderIn
	if len(locs) == 0 && len(rule.Inject) > 0 {
		locs = []string{"header"}
	}
	sw := b.swapper(values)
	if err := b.placeholders(r, d, sw, locs); err != nil {
		return err
	}
	for _, name := range bound {
		b.metrics.injections.WithLabelValues(name).Inc()
	}
	return nil
}

// swapper swaps bound placeholders for values: raw, and URL-encoded to URL-encoded.
type swapper struct {
	raw, query *Replacer
}

func (b *Broker) swapper(values map[string]string) swapper {
	key := swapperKey(values)
	b.swapMu.Lock()
	sw, ok := b.swaps[key]
	b.swapMu.Unlock()
	if ok {
		return sw
	}
	sw = b.newSwapper(values)
	b.swapMu.Lock()
	if b.swaps == nil || len(b.swaps) >= maxSwappers {
		b.swaps = make(map[string]swapper) // rotations past the bound: start again
	}
	b.swaps[key] = sw
	b.swapMu.Unlock()
	return sw
}

// maxSwappers bounds Broker.swaps.
const maxSwappers = 64

// swapperKey identifies a set of bound values: names in order, each with its value.
func swapperKey(values map[string]string) string {
	switch len(values) {
	case 0:
		return ""
	case 1: // the common case, without sorting: one allocation
		for n, v := range values {
			return n + "\x00" + v + "\x00"
		}
	}
	names := slices.Sorted(maps.Keys(values))
	var k strings.Builder
	for _, n := range names {
		k.WriteString(n)
		k.WriteByte(0)
		k.WriteString(values[n])
		k.WriteByte(0)
	}
	return k.String()
}

// newSwapper builds the swapper of values.
func (b *Broker) newSwapper(values map[string]string) swapper {
	var raw, query []pattern
	if b.cfg.Placeholders != nil {
		for name, v := range values {
			ph := b.cfg.Placeholders.For(name)
			raw = append(raw, pattern{find: []byte(ph), with: []byte(v)})
			esc := url.QueryEscape(v)
			query = append(query, pattern{find: []byte(ph), with: []byte(esc)},
				pattern{find: []byte(url.QueryEscape(ph)), with: []byte(esc)},
				pattern{find: []byte(strings.ReplaceAll(url.QueryEscape(ph), "%3A", "%3a")), with: []byte(esc)})
		}
	}
	return swapper{raw: newReplacer(raw), query: newReplacer(query)}
}

// placeholders swaps and checks placeholders in headers, path, query and body.
func (b *Broker) placeholders(r *http.Request, d policy.Decision, sw swapper, locs []string) error {
	misuse := func(where, text string) error {
		name := b.placeholderSecret(text)
		return b.refuse(r, d, policy.ReasonCredentialMisuse, name, fmt.Errorf(
			"a credential placeholder (secret %q) in the request %s is not allowed for this destination and location: %w",
			name, where, ErrMisuse))
	}
	for k, vs := range r.Header {
		for i, v := range vs {
			if !hasMark(v) && !(len(v) > 6 && strings.EqualFold(v[:6], "basic ")) {
				continue
			}
			out := v
			if slices.Contains(locs, "header") {
				out = swapBasic(sw.raw, mustString(sw.raw, v))
			}
			if hasMark(out) || hasMark(decodeBasic(out)) {
				return misuse("header "+k, v+" "+decodeBasic(v))
			}
			r.Header[k][i] = out
		}
	}
	if hasMark(r.URL.Path) || hasMark(r.URL.RawPath) {
		return misuse("path", r.URL.Path)
	}
	if q := r.URL.RawQuery; hasMark(q) {
		out := q
		if slices.Contains(locs, "query") {
			out = mustString(sw.query, q)
		}
		if hasMark(out) {
			uq, _ := url.QueryUnescape(q)
			return misuse("query", uq)
		}
		r.URL.RawQuery = out
		r.RequestURI = ""
	}
	if r.Body != nil && r.Body != http.NoBody {
		pats := make([]pattern, 0, 3)
		for _, m := range placeholderMarks {
			pats = append(pats, pattern{find: []byte(m), fail: &RefusalError{reason: policy.ReasonCredentialMisuse,
				err: fmt.Errorf("a credential placeholder in the request body is not allowed for this destination: %w", ErrMisuse)}})
		}
		// Never inside gRPC messages: a swap would change the length of the message and of
		// the protobuf field holding it, so there a placeholder is refused (messages.go).
		if slices.Contains(locs, "body") && !sw.raw.Empty() && !isGRPC(r.Header) {
			pats = append(pats, sw.raw.pats...)
			pats = append(pats, sw.query.pats...)
			// The body's length changes with the swap: send it chunked.
			r.ContentLength = -1
			r.Header.Del("Content-Length")
		}
		r.Body = &auditedBody{ReadCloser: newReplacer(pats).Reader(r.Body), b: b, r: r, d: d}
	}
	return nil
}

// auditedBody audits a placeholder refused in the body (the proxy sees the read error).
type auditedBody struct {
	io.ReadCloser
	b    *Broker
	r    *http.Request
	d    policy.Decision
	done bool
}

func (a *auditedBody) Read(p []byte) (int, error) {
	n, err := a.ReadCloser.Read(p)
	var re *RefusalError
	if err != nil && !a.done && errors.As(err, &re) {
		a.done = true
		a.b.metrics.misuse.WithLabelValues(secretLabel(re.secret)).Inc()
		a.b.auditRefusal(a.r, a.d, re)
	}
	return n, err
}

// hasMark reports whether s holds a placeholder in any spelling.
func hasMark(s string) bool {
	for _, m := range placeholderMarks {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// decodeBasic returns the decoded credentials of a "Basic ..." header value, or "".
func decodeBasic(v string) string {
	if len(v) < 6 || !strings.EqualFold(v[:6], "basic ") {
		return ""
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[6:]))
	if err != nil {
		return ""
	}
	return string(dec)
}

// swapBasic swaps placeholders inside the base64 credentials of a Basic header value.
func swapBasic(rep *Replacer, v string) string {
	dec := decodeBasic(v)
	if dec == "" || !hasMark(dec) {
		return v
	}
	return v[:6] + base64.StdEncoding.EncodeToString([]byte(mustString(rep, dec)))
}

func mustString(rep *Replacer, s string) string {
	out, _ := rep.String(s) // swap patterns never fail
	return out
}

// placeholderSecret names the secret of the first placeholder in s ("" when none parses).
func (b *Broker) placeholderSecret(s string) string {
	for _, m := range placeholderMarks {
		i := strings.Index(s, m)
		if i < 0 {
			continue
		}
		rest := s[i+len(m):]
		end := strings.IndexAny(rest, ":%")
		if end < 0 {
			return ""
		}
		name := rest[:end]
		if b.cfg.Placeholders != nil && strings.HasPrefix(rest[end:], ":") && strings.HasPrefix(s[i:], b.cfg.Placeholders.For(name)) {
			return name
		}
		if b.cfg.Placeholders != nil && strings.HasPrefix(s[i:], url.QueryEscape(b.cfg.Placeholders.For(name))) {
			return name
		}
		return ""
	}
	return ""
}

func secretLabel(name string) string {
	if name == "" {
		return "unknown"
	}
	return name
}

// refuse counts and audits a refusal and returns it as a *RefusalError.
func (b *Broker) refuse(r *http.Request, d policy.Decision, reason policy.Reason, secret string, err error) error {
	re := &RefusalError{reason: reason, secret: secret, err: err}
	b.metrics.misuse.WithLabelValues(secretLabel(secret)).Inc()
	b.auditRefusal(r, d, re)
	return re
}

func (b *Broker) auditRefusal(r *http.Request, d policy.Decision, re *RefusalError) {
	ev := b.event(r, d, audit.DecisionDeny)
	ev.Reason, ev.Detail = string(re.reason), re.Error()
	if re.secret != "" {
		ev.Secrets = []string{re.secret}
	}
	b.cfg.Audit.Log(ev)
}

func (b *Broker) auditFailure(r *http.Request, d policy.Decision, secret string, err error) {
	ev := b.event(r, d, audit.DecisionDeny)
	ev.Reason, ev.Secrets, ev.Error = string(policy.ReasonCredentialUnavailable), []string{secret}, b.red.String(err.Error())
	b.cfg.Audit.Log(ev)
}

// event is the credential audit event for r.
func (b *Broker) event(r *http.Request, d policy.Decision, decision string) audit.Event {
	dest := r.URL.Host
	if d.Host != "" && d.Port != 0 {
		dest = d.Host + ":" + strconv.Itoa(d.Port)
	}
	return audit.Event{Time: b.cfg.Now(), Kind: audit.KindCredential, Decision: decision, Rule: d.Rule,
		Destination: dest, Method: r.Method, Path: r.URL.Path}
}

// FilterResponse scrubs every known secret value (and its encodings) from the response
// headers, its body and its trailers before they reach the sandbox. The body is scrubbed as
// the sandbox will read it: every Content-Encoding the broker knows (gzip, deflate, br, zstd,
// up to three stacked) is decoded first and the body goes on in identity encoding, without
// Content-Length (its length changes). A body already in identity encoding with a known
// length keeps its Content-Length: its secrets are masked with '*' of the same length, as
// gRPC and WebSocket messages are. A body in an encoding it cannot decode is scrubbed as
// is when injected is false; when the request carried an injected secret (injected true),
// FilterResponse closes it and returns a *RefusalError wrapping ErrUndecodable instead.
// A gRPC or gRPC-Web body (binary or base64 text) is scrubbed message by message under its
// content codings, each message decoded from its grpc-encoding first (messages.go): every
// layer the client will undo is undone before scrubbing, whatever the stacking order.
func (b *Broker) FilterResponse(resp *http.Response, injected bool) (*http.Response, error) {
	rep := b.red.Replacer()
	if rep.Empty() {
		return resp, nil
	}
	b.red.Header(resp.Header)
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified || (resp.Request != nil && resp.Request.Method == http.MethodHead) {
		return resp, nil
	}
	raw := resp.Body
	codings := contentCodings(resp.Header)
	kind := grpcKind(resp.Header)
	if len(codings) == 0 && kind == notGRPC && resp.ContentLength >= 0 && len(resp.Trailer) == 0 {
		// Identity encoding with a known length: mask (same length) so Content-Length stays
		// true and the client gets one framed response instead of a chunked one.
		resp.Body = &scrubbedBody{Reader: b.red.maskReplacer().ReaderOfLength(io.NopCloser(raw), resp.ContentLength), raw: raw,
			resp: resp, red: b.red}
		return resp, nil
	}
	dec, decoded, err := decodeResponse(raw, codings, injected)
	if err != nil {
		return nil, err
	}
	if decoded {
		resp.Header.Del("Content-Encoding")
	}
	var body io.Reader = rep.Reader(dec)
	if kind != notGRPC && (decoded || len(codings) == 0) {
		body = &grpcBody{raw: dec, resp: resp, red: b.red, injected: injected, text: kind == grpcText,
			encoding: strings.ToLower(strings.TrimSpace(resp.Header.Get("Grpc-Encoding")))}
	}
	resp.Body = &scrubbedBody{Reader: body, dec: dec, raw: raw, resp: resp, red: b.red}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return resp, nil
}

// decodeResponse returns a reader of raw with codings undone, and whether it undid them. A
// body it cannot decode is returned as is when injected is false; when it is true, raw is
// closed and the error is a *RefusalError wrapping ErrUndecodable.
func decodeResponse(raw io.ReadCloser, codings []string, injected bool) (io.ReadCloser, bool, error) {
	if len(codings) == 0 {
		return io.NopCloser(raw), false, nil
	}
	d, err := decodeBody(raw, codings)
	switch {
	case err == nil:
		return d, true, nil
	case injected:
		_ = raw.Close()
		return nil, false, &RefusalError{reason: policy.ReasonResponseUndecodable, err: fmt.Errorf(
			"the response to a request carrying an injected secret cannot be scrubbed: %w", err)}
	}
	return io.NopCloser(raw), false, nil
}

// learnInjected teaches the redactor an injected header value that holds a secret in a form
// it does not derive itself: `{{ basic "user" "name" }}` sends base64("user:" + value).
func (b *Broker) learnInjected(v string) {
	if len(v) > 6 && strings.EqualFold(v[:6], "basic ") {
		b.red.Add(strings.TrimSpace(v[6:]))
		return
	}
	if !strings.ContainsRune(v, ' ') {
		b.red.Add(v) // a bare value, e.g. {{ basic ... }} in a custom header
	}
}

// decidedBy returns the policy whose rules made d: the identity's (d.Identity, its rules
// inject only the secrets it holds) or the sandbox's. ok is false when the identity is no
// longer in the policy (a reload removed it): then nothing may be injected.
func decidedBy(pol *policy.Policy, d policy.Decision) (*policy.Policy, bool) {
	if d.Identity == "" {
		return pol, true
	}
	return pol.Identity(d.Identity)
}
