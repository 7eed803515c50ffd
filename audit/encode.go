package audit

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendBody appends e as a JSON object without its closing: the chain fields and the
// closing (appendTail) follow once the line's place in the chain is known. Optional fields
// are left out when zero; bytes_up, bytes_down and would_deny are always present.
func (e Event) appendBody(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = appendField(b, "sandbox", e.Sandbox, true)
	b = appendField(b, "kind", string(e.Kind), true)
	b = appendField(b, "decision", e.Decision, true)
	b = append(b, `,"would_deny":`...)
	b = strconv.AppendBool(b, e.Decision == DecisionReport)
	b = appendField(b, "rule", e.Rule, true)
	b = appendField(b, "reason", e.Reason, false)
	b = appendField(b, "detail", e.Detail, false)
	b = appendField(b, "destination", e.Destination, false)
	b = appendField(b, "addr", e.Addr, false)
	b = appendField(b, "method", e.Method, false)
	b = appendField(b, "path", e.Path, false)
	if e.Status != 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
	}
	b = append(b, `,"bytes_up":`...)
	b = strconv.AppendInt(b, e.BytesUp, 10)
	b = append(b, `,"bytes_down":`...)
	b = strconv.AppendInt(b, e.BytesDown, 10)
	if e.Duration != 0 {
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendFloat(b, durationMS(e.Duration), 'f', -1, 64)
	}
	if len(e.Secrets) > 0 {
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
		b = append(b, ']')
	}
	b = appendField(b, "client", e.Client, false)
	b = appendField(b, "policy", e.Policy, false)
	b = appendField(b, "identity", e.Identity, false)
	b = appendField(b, "error", e.Error, false)
	b = e.appendLLM(b)
	b = appendField(b, "request_id", e.RequestID, false)
	b = appendField(b, "phase", e.Phase, false)
	if e.Count > 1 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, e.Count, 10)
	}
	return b
}

// appendTail closes a line begun by appendBody: its sequence number, the hash of the line
// before it, the logrus markers and the newline.
func appendTail(b []byte, seq uint64, prev *[32]byte) []byte {
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"prev":"`...)
	for _, c := range prev {
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	return append(b, `","level":"info","msg":"audit"}`+"\n"...)
}

func durationMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// appendField appends `,"key":"value"` (value bounded: boundField); with always false an
// empty value is left out.
func appendField(b []byte, key, value string, always bool) []byte {
	if value == "" && !always {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendString(b, boundField(value, MaxFieldBytes))
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

// appendString appends s as a JSON string. Control characters, quotes and backslashes are
// escaped, invalid UTF-8 becomes U+FFFD, and U+2028/U+2029 are escaped so a line is safe to
// embed in JavaScript too (as encoding/json does). Paths and hosts come from the sandbox,
// so this is what keeps a hostile request from forging or breaking audit lines.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
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
