package proxy

// WebSocket through the proxy (RFC 6455), on intercepted tunnels, absolute-form requests and
// transparent HTTP. The upgrade request is an ordinary request first: decided on its method
// and path, credentials injected. Only "Upgrade: websocket" is relayed; any other upgrade
// (h2c included) is refused before it goes upstream. The offer of extensions
// (Sec-WebSocket-Extensions, i.e. permessage-deflate) is removed, so frames carry their
// messages uncompressed where the proxy can read them. The connection becomes a relay only
// after a real 101 whose Sec-WebSocket-Accept matches the key; then every message, in each
// direction, is assembled from its fragments, handled whole, and sent on as one frame with a
// correct length (and, towards the upstream, a fresh mask):
//   - sandbox to upstream: MessageFilter.RequestMessages swaps credential placeholders where
//     the rule allows them in the body, and refuses any other; a refused message is never
//     sent: the sandbox gets Close 1008 and the exchange is audited as a denial;
//   - upstream to sandbox: MessageFilter.ScrubMessage masks every known secret value with as
//     many '*' as it has bytes.

import (
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// MessageFilter is implemented by an Injector that also handles credentials inside the
// messages of a WebSocket connection, where the proxy re-frames every message it changes.
// Without it, an Injector's requests may not upgrade to WebSocket (upgrade_unsupported).
type MessageFilter interface {
	// RequestMessages returns the check of every message the sandbox sends on the WebSocket
	// opened by r (after Inject) under decision d: the message to send, with placeholders
	// swapped where d's rule allows them in the body, or an error (a Refusal to deny).
	RequestMessages(r *http.Request, d policy.Decision) (func([]byte) ([]byte, error), error)
	// ScrubMessage returns b with every known secret value (and its encodings) replaced by
	// as many '*' as it has bytes, so the message keeps its length.
	ScrubMessage(b []byte) []byte
}

// wsGUID is the GUID of the Sec-WebSocket-Accept computation (RFC 6455 section 4.2.2).
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// wsUpgrade is what an exchange knows of a WebSocket upgrade it forwards.
type wsUpgrade struct {
	key     string
	request func([]byte) ([]byte, error) // RequestMessages' check
	scrub   func([]byte) []byte
}

// checkUpgrade refuses an upgrade other than a well-formed WebSocket handshake, and
// prepares the exchange to relay one.
func (x *exchange) checkUpgrade(r *http.Request) (policy.Decision, bool) {
	up := r.Header.Values("Upgrade")
	if len(up) == 0 {
		return policy.Decision{}, true
	}
	refuse := func(detail string) (policy.Decision, bool) {
		return policy.Decision{Verdict: policy.Deny, Reason: policy.ReasonUpgradeUnsupported, Rule: x.d.Rule,
			Host: x.d.Host, Port: x.d.Port, Detail: detail}, false
	}
	if len(up) != 1 || !strings.EqualFold(strings.TrimSpace(up[0]), "websocket") {
		return refuse(fmt.Sprintf("the request asks to upgrade to %q; only websocket is relayed", strings.Join(up, ", ")))
	}
	key, err := base64.StdEncoding.DecodeString(r.Header.Get("Sec-WebSocket-Key"))
	switch {
	case r.Method != http.MethodGet || !headerHasToken(r.Header, "Connection", "upgrade"):
		return refuse("a WebSocket upgrade must be a GET with Connection: Upgrade")
	case err != nil || len(key) != 16 || r.Header.Get("Sec-WebSocket-Version") != "13":
		return refuse("the WebSocket handshake needs a 16-byte Sec-WebSocket-Key and Sec-WebSocket-Version 13")
	}
	if _, ok := x.p.cfg.Injector.(MessageFilter); !ok && x.p.cfg.Injector != nil {
		return refuse("the credential broker cannot check WebSocket messages")
	}
	r.Header.Del("Sec-WebSocket-Extensions") // no permessage-deflate: messages stay readable
	x.ws = &wsUpgrade{key: r.Header.Get("Sec-WebSocket-Key"),
		request: func(b []byte) ([]byte, error) { return b, nil }, scrub: func(b []byte) []byte { return b }}
	return policy.Decision{}, true
}

// headerHasToken reports whether a comma-separated header of h holds token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, s := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(s), token) {
				return true
			}
		}
	}
	return false
}

// prepareUpgrade gets the message checks of a WebSocket upgrade from the Injector (after
// Inject). It returns the response that ends the request, or nil.
func (x *exchange) prepareUpgrade(r *http.Request) *http.Response {
	mf, ok := x.p.cfg.Injector.(MessageFilter)
	if !ok {
		return nil
	}
	check, err := mf.RequestMessages(r, x.d)
	if err != nil {
		if ref, ok := asRefusal(err); ok {
			return x.deny(r, x.refusalDecision(ref))
		}
		x.setError(fmt.Errorf("prepare websocket message checks: %w", err))
		return x.fail(r, policy.ReasonInjectionFailed)
	}
	x.ws.request, x.ws.scrub = check, mf.ScrubMessage
	return nil
}

// switchProtocols turns the upstream's 101 into the client's: only the answer to a WebSocket
// handshake this exchange forwarded, with a valid Sec-WebSocket-Accept and no extension,
// becomes a relay of checked messages; any other switch fails (upgrade_unsupported).
func (x *exchange) switchProtocols(r *http.Request, resp *http.Response) *http.Response {
	body, ok := resp.Body.(io.ReadWriteCloser)
	sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + wsGUID))
	var why string
	switch {
	case x.ws == nil:
		why = "upstream switched protocols on a request that asked for no WebSocket"
	case !ok:
		why = "upstream switched protocols without a connection to relay"
	case !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") || !headerHasToken(resp.Header, "Connection", "upgrade"):
		why = "upstream switched to another protocol than websocket"
	case resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]):
		why = "upstream's Sec-WebSocket-Accept does not match the key"
	case resp.Header.Get("Sec-WebSocket-Extensions") != "":
		why = "upstream accepted a WebSocket extension that was not offered"
	}
	if why != "" {
		_ = resp.Body.Close()
		x.setError(errors.New(why))
		return x.fail(r, policy.ReasonUpgradeUnsupported)
	}
	for k, vs := range resp.Header {
		for i, v := range vs {
			resp.Header[k][i] = string(x.ws.scrub([]byte(v)))
		}
	}
	if decision, _ := x.outcome(); decision == audit.DecisionReport {
		resp.Header.Set(headerDecision, audit.DecisionReport)
	}
	x.mu.Lock()
	x.status = resp.StatusCode
	x.mu.Unlock()
	rel := &wsRelay{x: x, up: body, ws: x.ws}
	// Tracked so Shutdown waits for the connection and closes it when it stops waiting (a
	// hijacked connection is no longer the http.Server's).
	rel.tracked = x.p.active.add(wsCloser{rel})
	// A hijacked connection has no deadlines: a relay with no message either way for
	// IdleTimeout is closed, as an idle tunnel is.
	rel.idle = time.AfterFunc(x.p.cfg.IdleTimeout, func() { _ = wsCloser{rel}.Close() })
	resp.Body = rel
	return resp
}

// wsCloser closes both sides of a relay for the tracker, which holds its lock meanwhile;
// the relay's own Close (which leaves the tracker) follows when goproxy's copies end.
type wsCloser struct{ w *wsRelay }

func (c wsCloser) Close() error {
	_ = c.w.up.Close()
	if s := c.w.x.o.stream; s != nil {
		s.closeHijacked()
	}
	return nil
}

// wsRelay is the body of a relayed 101: goproxy copies the client's bytes into Write and
// Read's bytes to the client, each from its own goroutine, and closes it when either side
// ends. Close ends the exchange, closes the upstream and the hijacked client connection.
type wsRelay struct {
	x  *exchange
	up io.ReadWriteCloser
	ws *wsUpgrade

	// Read side (upstream to client), used by one goroutine.
	scratch []byte
	rbuf    []byte
	out     []byte
	rmsg    wsAssembler
	rerr    error

	// Write side (client to upstream), used by one goroutine.
	in      []byte
	wmsg    wsAssembler
	refused bool

	// mu guards pending: a Close frame for the client, sent after the upstream's bytes.
	mu      sync.Mutex
	pending []byte

	tracked *trackedConn // in Proxy.active until Close
	idle    *time.Timer  // closes the relay after IdleTimeout without a message
	once    sync.Once
}

// Read returns the upstream's messages, scrubbed, one whole frame each.
func (w *wsRelay) Read(p []byte) (int, error) {
	for len(w.out) == 0 {
		if w.rerr != nil {
			w.mu.Lock()
			w.out, w.pending = w.pending, nil
			w.mu.Unlock()
			if len(w.out) == 0 {
				return 0, w.rerr
			}
			break
		}
		w.readMessage()
	}
	n := copy(p, w.out)
	w.out = w.out[n:]
	w.x.down.Add(int64(n))
	w.x.p.metrics.bytesOf(w.x.pol.IdentityName()).down.Add(float64(n))
	return n, nil
}

// readMessage reads from the upstream until it has a whole message (or control frame) to
// hand out, or an error.
func (w *wsRelay) readMessage() {
	for {
		f, size, err := parseFrame(w.rbuf, maxWSMessage)
		if err == nil && size > 0 && f.masked {
			err = fmt.Errorf("masked frame from the server: %w", errWSProtocol)
		}
		if err != nil {
			w.x.setError(fmt.Errorf("relay websocket from upstream: %w", err))
			w.rerr = err
			return
		}
		if size == 0 {
			if w.scratch == nil {
				w.scratch = make([]byte, 32<<10)
			}
			n, err := w.up.Read(w.scratch)
			w.rbuf = append(w.rbuf, w.scratch[:n]...)
			if err != nil && n == 0 {
				w.rerr = err
				return
			}
			continue
		}
		w.rbuf = append(w.rbuf[:0], w.rbuf[size:]...)
		op, payload, done, err := w.rmsg.add(f)
		if err != nil {
			w.x.setError(fmt.Errorf("relay websocket from upstream: %w", err))
			w.rerr = err
			return
		}
		if done {
			w.idle.Reset(w.x.p.cfg.IdleTimeout)
			w.out = encodeFrame(nil, op, w.ws.scrub(payload), false)
			return
		}
	}
}

// Write takes the client's bytes, and sends each whole message on once it is checked.
// After a refusal it discards what the client sends until the relay closes.
func (w *wsRelay) Write(p []byte) (int, error) {
	if w.refused {
		return len(p), nil
	}
	w.in = append(w.in, p...)
	for {
		f, size, err := parseFrame(w.in, maxWSMessage)
		if err == nil && size > 0 && !f.masked {
			err = fmt.Errorf("unmasked frame from the client: %w", errWSProtocol)
		}
		if err != nil {
			w.x.setError(fmt.Errorf("relay websocket from client: %w", err))
			return 0, err
		}
		if size == 0 {
			return len(p), nil
		}
		w.in = append(w.in[:0], w.in[size:]...)
		op, payload, done, err := w.wmsg.add(f)
		if err != nil {
			w.x.setError(fmt.Errorf("relay websocket from client: %w", err))
			return 0, err
		}
		if !done {
			continue
		}
		w.idle.Reset(w.x.p.cfg.IdleTimeout)
		if err := w.send(op, payload); err != nil {
			return 0, err
		}
		if w.refused {
			return len(p), nil
		}
	}
}

// send checks one message of the client's and writes it upstream; a refused message ends
// the relay with Close 1008 to the client.
func (w *wsRelay) send(op byte, payload []byte) error {
	out, err := w.ws.request(payload)
	if err == nil && op >= wsClose && len(out) > maxWSControl {
		err = fmt.Errorf("control frame over %d bytes after placeholders were swapped: %w", maxWSControl, errWSProtocol)
	}
	if err != nil {
		ref, ok := asRefusal(err)
		if !ok {
			w.x.setError(fmt.Errorf("check websocket message: %w", err))
			return err
		}
		d := w.x.refusalDecision(ref)
		w.x.mu.Lock()
		w.x.refusal = &d
		w.x.mu.Unlock()
		w.refused = true
		w.mu.Lock()
		w.pending = encodeFrame(nil, wsClose, closePayload(1008, "airlock: "+string(ref.DenyReason())), false)
		w.mu.Unlock()
		_ = w.up.Close() // ends the Read side, which hands the Close frame to the client
		return nil
	}
	frame := encodeFrame(nil, op, out, true)
	if _, err := w.up.Write(frame); err != nil {
		return err
	}
	w.x.up.Add(int64(len(frame)))
	w.x.p.metrics.bytesOf(w.x.pol.IdentityName()).up.Add(float64(len(frame)))
	return nil
}

// Close ends the relay: both connections close and the exchange is audited.
func (w *wsRelay) Close() error {
	w.once.Do(func() {
		w.idle.Stop()
		_ = wsCloser{w}.Close()
		w.x.p.active.remove(w.tracked)
		w.x.finish()
	})
	return nil
}

var _ io.ReadWriteCloser = (*wsRelay)(nil)
