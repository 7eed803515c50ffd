package credentials

// Credentials inside framed streams, where each message carries its own length: WebSocket
// frames (the proxy re-frames the messages this file checks and scrubs) and gRPC messages
// (length-prefixed, RFC-less but specified in gRPC's PROTOCOL-HTTP2.md). A secret in such
// a message is masked with as many '*' as it has bytes, so every length stays valid — the
// frame's, the gRPC prefix's, and the protobuf field lengths inside the message.

import (
	"bytes"
	"encoding/base64"
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
	pol, ok := decidedBy(b.cfg.Policy.Current(), d)
	if !ok {
		return nil, fmt.Errorf("identity %q is no longer in the policy: %w", d.Identity, ErrUnavailable)
	}
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

// The kinds of message stream a response body can be (grpcKind).
const (
	notGRPC    = iota
	grpcBinary // application/grpc, application/grpc-web: length-prefixed messages
	grpcText   // application/grpc-web-text: the same, base64-encoded
)

// grpcKind says whether h is the header of a gRPC or gRPC-Web message stream, and which. Any
// media type starting "application/grpc" counts (clients differ in how strictly they check
// it, and one read as messages that is not fails rather than leaks).
func grpcKind(h http.Header) int {
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	ct = strings.ToLower(strings.TrimSpace(ct))
	switch {
	case strings.HasPrefix(ct, "application/grpc-web-text"):
		return grpcText
	case strings.HasPrefix(ct, "application/grpc"):
		return grpcBinary
	}
	return notGRPC
}

// isGRPC reports whether h is the header of a gRPC or gRPC-Web message stream.
func isGRPC(h http.Header) bool { return grpcKind(h) != notGRPC }

// grpcBody is a gRPC response body scrubbed message by message: each message is read whole,
// decompressed when its grpc-encoding is one the broker decodes (gzip, deflate, zstd, br;
// and sent on uncompressed, which the per-message flag allows), masked, and sent with its
// new length. With text (gRPC-Web text) the body is base64 and each scrubbed message is sent
// base64-encoded on its own, as gRPC-Web servers send them. At the end the trailers, where
// gRPC's status and message live, are scrubbed before EOF is reported.
type grpcBody struct {
	raw      io.Reader
	resp     *http.Response
	red      *Redactor
	encoding string // grpc-encoding of the response
	injected bool
	text     bool // the body is gRPC-Web text (base64)
	src      io.Reader
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
	if g.src == nil {
		g.src = g.raw
		if g.text {
			g.src = &base64Quanta{src: g.raw}
		}
	}
	var hdr [5]byte
	if _, err := io.ReadFull(g.src, hdr[:]); err != nil {
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
	if _, err := io.ReadFull(g.src, msg); err != nil {
		return nil, fmt.Errorf("read gRPC message: %w", err)
	}
	flag, msg, err := g.decompress(hdr[0], msg)
	if err != nil {
		return nil, err
	}
	if flag&1 == 0 {
		msg = g.red.Mask(msg)
	}
	out := make([]byte, 5, 5+len(msg))
	out[0] = flag
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	out = append(out, msg...)
	if g.text {
		out = base64.StdEncoding.AppendEncode(nil, out)
	}
	return out, nil
}

// decompress undoes a compressed message's grpc-encoding and clears its flag. A message it
// cannot decode is returned as is, or refused after an injection.
func (g *grpcBody) decompress(flag byte, msg []byte) (byte, []byte, error) {
	if flag&1 == 0 {
		return flag, msg, nil
	}
	open, ok := messageDecoders[g.encoding]
	if !ok {
		if g.injected {
			return 0, nil, &RefusalError{reason: policy.ReasonResponseUndecodable, err: fmt.Errorf(
				"a gRPC message compressed with %q cannot be scrubbed after an injection: %w", g.encoding, ErrUndecodable)}
		}
		return flag, msg, nil
	}
	zr, err := open(bytes.NewReader(msg))
	if err != nil {
		return 0, nil, fmt.Errorf("decode gRPC message: %w: %w", err, ErrUndecodable)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, maxGRPCMessage+1))
	if err != nil || len(out) > maxGRPCMessage {
		return 0, nil, fmt.Errorf("decode gRPC message (%q): %w", g.encoding, ErrUndecodable)
	}
	return flag &^ 1, out, nil
}

// messageDecoders are the grpc-encoding values (gRPC's compression.md) whose messages the
// broker decodes: the content-coding decoders of the same names.
var messageDecoders = map[string]func(io.Reader) (io.ReadCloser, error){
	"gzip": decoders["gzip"], "deflate": decoders["deflate"], "zstd": decoders["zstd"], "br": decoders["br"],
}

func (g *grpcBody) Close() error { return nil }

// base64Quanta decodes a gRPC-Web text body: base64 in groups of four characters, where each
// message (and the trailer frame) may have been encoded on its own, so padding can end any
// group, not only the last. Anything else is ErrUndecodable.
type base64Quanta struct {
	src     io.Reader
	pending []byte // undecoded characters, fewer than four after each decode
	out     []byte
	err     error
}

func (q *base64Quanta) Read(p []byte) (int, error) {
	for len(q.out) == 0 {
		if q.err != nil {
			if errors.Is(q.err, io.EOF) && len(q.pending) > 0 {
				return 0, fmt.Errorf("gRPC-Web text body ends inside a base64 group: %w", ErrUndecodable)
			}
			return 0, q.err
		}
		var buf [4096]byte
		n, err := q.src.Read(buf[:])
		q.err = err
		q.pending = append(q.pending, buf[:n]...)
		whole := len(q.pending) / 4 * 4
		for i := 0; i < whole; i += 4 {
			var dst [3]byte
			m, derr := base64.StdEncoding.Decode(dst[:], q.pending[i:i+4])
			if derr != nil {
				return 0, fmt.Errorf("gRPC-Web text body: %w: %w", derr, ErrUndecodable)
			}
			q.out = append(q.out, dst[:m]...)
		}
		q.pending = append(q.pending[:0], q.pending[whole:]...)
	}
	n := copy(p, q.out)
	q.out = q.out[n:]
	return n, nil
}
