package audit

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// The encoder is on the hot path (two events per proxied request), so it appends each key
// with its punctuation as one constant, scans string values eight bytes at a time for the
// few bytes JSON needs escaped (plain8), and formats a duration without strconv's float
// formatting when it can. Its output is byte for byte what it was before these shortcuts
// (encode_ref_test.go holds the old encoder, TestEncoderMatchesReference and FuzzEncoder
// compare the two): logs written by either read and verify alike.

// appendBody appends e as a JSON object without its closing: the chain fields and the
// closing (appendTail) follow once the line's place in the chain is known. Optional fields
// are left out when zero; bytes_up, bytes_down and would_deny are always present.
func (e *Event) appendBody(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = appendField(append(b, '"'), `,"sandbox":`, e.Sandbox, true)
	b = appendField(b, `,"kind":`, string(e.Kind), true)
	b = appendField(b, `,"decision":`, e.Decision, true)
	if e.Decision == DecisionReport {
		b = append(b, `,"would_deny":true`...)
	} else {
		b = append(b, `,"would_deny":false`...)
	}
	b = appendField(b, `,"rule":`, e.Rule, true)
	b = appendField(b, `,"reason":`, e.Reason, false)
	b = appendField(b, `,"detail":`, e.Detail, false)
	b = appendField(b, `,"destination":`, e.Destination, false)
	b = appendField(b, `,"addr":`, e.Addr, false)
	b = appendField(b, `,"method":`, e.Method, false)
	b = appendField(b, `,"path":`, e.Path, false)
	if e.Status != 0 {
		b = strconv.AppendInt(append(b, `,"status":`...), int64(e.Status), 10)
	}
	b = strconv.AppendInt(append(b, `,"bytes_up":`...), e.BytesUp, 10)
	b = strconv.AppendInt(append(b, `,"bytes_down":`...), e.BytesDown, 10)
	if e.Duration != 0 {
		b = appendMS(append(b, `,"duration_ms":`...), e.Duration.Microseconds())
	}
	if len(e.Secrets) > 0 {
		b = e.appendSecrets(b)
	}
	b = appendField(b, `,"client":`, e.Client, false)
	b = appendField(b, `,"policy":`, e.Policy, false)
	b = appendField(b, `,"identity":`, e.Identity, false)
	b = appendField(b, `,"error":`, e.Error, false)
	if e.Kind == KindLLM {
		b = e.appendLLM(b)
	}
	b = appendField(b, `,"request_id":`, e.RequestID, false)
	b = appendField(b, `,"phase":`, e.Phase, false)
	if e.Count > 1 {
		b = strconv.AppendInt(append(b, `,"count":`...), e.Count, 10)
	}
	return b
}

// appendSecrets appends the secrets field: at most maxSecrets names, then a count of those
// left out.
func (e *Event) appendSecrets(b []byte) []byte {
	b = append(b, `,"secrets":[`...)
	for i, s := range e.Secrets[:min(len(e.Secrets), maxSecrets)] {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, boundField(s, maxSecretName))
	}
	if n := len(e.Secrets); n > maxSecrets {
		b = appendString(append(b, ','), "…["+strconv.Itoa(n-maxSecrets)+" more]")
	}
	return append(b, ']')
}

// appendTail closes a line begun by appendBody: its sequence number, the hash of the line
// before it, the logrus markers and the newline.
func appendTail(b []byte, seq uint64, prev *[32]byte) []byte {
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"prev":"`...)
	b = slices.Grow(b, 2*len(prev)+len(tailEnd))
	n := len(b)
	b = b[:n+2*len(prev)]
	for i, c := range prev {
		b[n+2*i], b[n+2*i+1] = hex[c>>4], hex[c&0xf]
	}
	return append(b, tailEnd...)
}

// maxExactMS bounds the microseconds appendMS writes itself: below it, a count of
// microseconds divided by 1000 has at most 15 significant digits, which a float64 tells
// apart, so its shortest decimal form (strconv's 'f', -1) is the exact quotient.
const maxExactMS = 1e15

// appendMS appends us/1000 as strconv.AppendFloat(b, float64(us)/1000, 'f', -1, 64) would:
// the integer part, then up to three decimals without trailing zeros.
func appendMS(b []byte, us int64) []byte {
	if us < 0 || us >= maxExactMS {
		return strconv.AppendFloat(b, float64(us)/1000, 'f', -1, 64)
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return b
	}
	d := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for d[n-1] == '0' {
		n--
	}
	return append(append(b, '.'), d[:n]...)
}

// appendField appends key (`,"name":`) and value as a JSON string (bounded: boundField);
// with always false an empty value is left out.
func appendField(b []byte, key, value string, always bool) []byte {
	if value == "" && !always {
		return b
	}
	return appendString(append(b, key...), boundField(value, MaxFieldBytes))
}

// Every field an event records may come from the sandbox (a host, a path, a model name, an
// error quoting either), so every field is bounded: a line stays far below maxLine (the
// longest any reader takes), whatever the sandbox sends. A model name of megabytes would
// otherwise make a line a restart cannot read back, and break the chain.
const (
	// MaxFieldBytes bounds one string field of an event, before JSON escaping.
	MaxFieldBytes = 4096
	// maxSecrets bounds the secret names one event lists, maxSecretName each name.
	maxSecrets    = 64
	maxSecretName = 256
)

// boundField returns s, or its first bytes (cut on a UTF-8 boundary) followed by a marker
// with its original length when it is longer than limit bytes.
func boundField(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit - 40 // room for the marker
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[truncated: " + strconv.Itoa(len(s)) + " bytes]"
}

const hex = "0123456789abcdef"

// tailEnd closes every line: the logrus markers and the newline.
const tailEnd = `","level":"info","msg":"audit"}` + "\n"

// Masks for plain8, one byte each of a 64-bit word.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plain8 reports whether the eight bytes of w (load64) need no escaping: none is a control
// character, a quote, a backslash or a byte of a multi-byte UTF-8 sequence. Each test is the
// classic exact "has a zero byte" or "has a byte below n" word test (n ≤ 128); a false
// answer only sends the bytes to appendString's byte-at-a-time loop.
func plain8(w uint64) bool {
	q, bs := w^(ones*'"'), w^(ones*'\\')
	return ((w-ones*0x20)&^w|(q-ones)&^q|(bs-ones)&^bs|w)&highs == 0
}

// load64 returns the eight bytes of s from i as a little-endian word (one load: the
// compiler combines the byte loads).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// appendString appends s as a JSON string. Control characters, quotes and backslashes are
// escaped, invalid UTF-8 becomes U+FFFD, and U+2028/U+2029 are escaped so a line is safe to
// embed in JavaScript too (as encoding/json does). Paths and hosts come from the sandbox,
// so this is what keeps a hostile request from forging or breaking audit lines.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && plain8(load64(s, i)) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
