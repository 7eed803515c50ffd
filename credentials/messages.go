package credentials

// Credentials inside framed streams, where each message carries its own length: WebSocket
// frames (the proxy re-frames the messages this file checks and scrubs) and gRPC messages
// (length-prefixed, RFC-less but specified in gRPC's PROTOCOL-HTTP2.md). A secret in such
// a message is masked with as many '*' as it has bytes, so every length stays valid — the
// frame's, the gRPC prefix's, and the protobuf field lengths inside the message.

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// maxGRPCMessage bounds a gRPC response message the broker reads whole to scrub it (four
// times gRPC's default receive limit); a larger one ends the response with an error.
const maxGRPCMessage = 16 << 20

// ScrubMessage returns msg with every known secret value (and its encodings) replaced by as
// many '*' as it has bytes (proxy.MessageFilter).
func (b *Broker) ScrubMessage(msg []byte) []byte { return b.red.Mask(msg) }

// RequestMessages returns the check of the messages the sandbox sends on a WebSocket opened
// by r under decision d (proxy.MessageFilter): where d's rule binds secrets and allows
// placeholders in the body (its placeholderIn names body), a bound secret's placeholder is swapped for its value; any other placeholder is
// refused with a *RefusalError (credential_misuse), which is counted and audited. Errors:
// one wrapping ErrUnavailable when a bound secret cannot be had.
func (b *Broker) RequestMessages(r *http.Request, d policy.Decision) (func([]byte) ([]byte, error), error) {
	pol := b.cfg.Policy.Current()
	var rule policy.Rule
	if d.Rule != "" && d.Intercept && d.Allowed() && !d.WouldDeny {
		rule, _ = pol.Rule(d.Rule)
	}
	var pats []pattern
	for _, m := range placeholderMarks {
		pats = append(pats, pattern{find: []byte(m), fail: &RefusalError{reason: policy.ReasonCredentialMisuse,
			err: fmt.Errorf("a credential placeholder in a WebSocket message is not allowed for this destination: %w", ErrMisuse)}})
	}
	if !d.WouldDeny && len(d.Secrets) > 0 && slices.Contains(rule.PlaceholderIn, "body") {
		secrets := b.secretsOf(pol)
		values := make(map[string]string, len(d.Secrets))
		for _, name := range d.Secrets {
			v, err := b.resolve(r.Context(), name, secrets[name])
			if err != nil {
				return nil, err
			}
			values[name] = v
		}
		pats = append(pats, b.swapper(values).raw.pats...)
	}
	rep := newReplacer(pats)
	return func(msg []byte) ([]byte, error) {
		out, err := rep.Bytes(msg)
		var re *RefusalError
		if errors.As(err, &re) {
			re = &RefusalError{reason: re.reason, secret: b.placeholderSecret(string(msg)), err: re.err}
			b.metrics.misuse.WithLabelValues(secretLabel(re.secret)).Inc()
			b.auditRefusal(r, d, re)
			return nil, re
		}
		return out, err
	}, nil
}

// isGRPC reports whether h is the header of a gRPC (or binary gRPC-Web) message stream,
// whose body is length-prefixed messages.
func isGRPC(h http.Header) bool {
	ct := strings.ToLower(h.Get("Content-Type"))
	for _, p := range []string{"application/grpc", "application/grpc-web"} {
		if ct == p || strings.HasPrefix(ct, p+"+") || strings.HasPrefix(ct, p+";") {
			return true
		}
	}
	return false
}

// grpcBody is a gRPC response body scrubbed message by message: each message is read whole,
// decompressed when it is gzip (and sent on uncompressed, which the per-message flag
// allows), masked, and sent with its new (equal) length. At the end the trailers, where
// gRPC's status and message live, are scrubbed before EOF is reported.
type grpcBody struct {
	raw      io.ReadCloser
	resp     *http.Response
	red      *Redactor
	encoding string // grpc-encoding of the response
	injected bool
	out      []byte
	err      error
}

func (g *grpcBody) Read(p []byte) (int, error) {
	for len(g.out) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		g.out, g.err = g.next()
	}
	n := copy(p, g.out)
	g.out = g.out[n:]
	return n, nil
}

// next reads and scrubs one message. At the end of the body it scrubs the trailers and
// returns io.EOF.
func (g *grpcBody) next() ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(g.raw, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			g.red.Header(g.resp.Trailer)
		}
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxGRPCMessage {
		return nil, fmt.Errorf("gRPC message of %d bytes is over %d: %w", n, maxGRPCMessage, ErrUndecodable)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(g.raw, msg); err != nil {
		return nil, fmt.Errorf("read gRPC message: %w", err)
	}
	flag := hdr[0]
	if flag&1 != 0 && g.encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(msg))
		if err != nil {
			return nil, fmt.Errorf("decode gRPC message: %w: %w", err, ErrUndecodable)
		}
		if msg, err = io.ReadAll(io.LimitReader(zr, maxGRPCMessage+1)); err != nil || len(msg) > maxGRPCMessage {
			return nil, fmt.Errorf("decode gRPC message: %w", ErrUndecodable)
		}
		flag &^= 1
	} else if flag&1 != 0 && g.injected {
		return nil, &RefusalError{reason: policy.ReasonResponseUndecodable, err: fmt.Errorf(
			"a gRPC message compressed with %q cannot be scrubbed after an injection: %w", g.encoding, ErrUndecodable)}
	}
	if flag&1 == 0 {
		msg = g.red.Mask(msg)
	}
	out := make([]byte, 5, 5+len(msg))
	out[0] = flag
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...), nil
}

func (g *grpcBody) Close() error { return g.raw.Close() }
