package audit

// The encoder as it was before it was made faster (commit c49e760's encode.go and llm.go,
// renamed): the reference the differential tests hold the current encoder to, byte for byte,
// so that logs written before and after the change read and verify alike.

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// refAppendBody appends e as a JSON object without its closing: the chain fields and the
// closing (appendTail) follow once the line's place in the chain is known. Optional fields
// are left out when zero; bytes_up, bytes_down and would_deny are always present.
func (e Event) refAppendBody(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = refAppendField(b, "sandbox", e.Sandbox, true)
	b = refAppendField(b, "kind", string(e.Kind), true)
	b = refAppendField(b, "decision", e.Decision, true)
	b = append(b, `,"would_deny":`...)
	b = strconv.AppendBool(b, e.Decision == DecisionReport)
	b = refAppendField(b, "rule", e.Rule, true)
	b = refAppendField(b, "reason", e.Reason, false)
	b = refAppendField(b, "detail", e.Detail, false)
	b = refAppendField(b, "destination", e.Destination, false)
	b = refAppendField(b, "addr", e.Addr, false)
	b = refAppendField(b, "method", e.Method, false)
	b = refAppendField(b, "path", e.Path, false)
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
		b = strconv.AppendFloat(b, float64(e.Duration.Microseconds())/1000, 'f', -1, 64)
	}
	if len(e.Secrets) > 0 {
		b = append(b, `,"secrets":[`...)
		for i, s := range e.Secrets[:min(len(e.Secrets), maxSecrets)] {
			if i > 0 {
				b = append(b, ',')
			}
			b = refAppendString(b, refBoundField(s, maxSecretName))
		}
		if n := len(e.Secrets); n > maxSecrets {
			b = refAppendString(append(b, ','), "…["+strconv.Itoa(n-maxSecrets)+" more]")
		}
		b = append(b, ']')
	}
	b = refAppendField(b, "client", e.Client, false)
	b = refAppendField(b, "policy", e.Policy, false)
	b = refAppendField(b, "identity", e.Identity, false)
	b = refAppendField(b, "error", e.Error, false)
	b = e.refAppendLLM(b)
	b = refAppendField(b, "request_id", e.RequestID, false)
	b = refAppendField(b, "phase", e.Phase, false)
	if e.Count > 1 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, e.Count, 10)
	}
	return b
}

// refAppendField appends `,"key":"value"` (value bounded: boundField); with always false an
// empty value is left out.
func refAppendField(b []byte, key, value string, always bool) []byte {
	if value == "" && !always {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return refAppendString(b, refBoundField(value, MaxFieldBytes))
}

// refBoundField returns s, or its first bytes (cut on a UTF-8 boundary) followed by a marker
// with its original length when it is longer than limit bytes.
func refBoundField(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit - 40 // room for the marker
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[truncated: " + strconv.Itoa(len(s)) + " bytes]"
}

// refAppendString appends s as a JSON string. Control characters, quotes and backslashes are
// escaped, invalid UTF-8 becomes U+FFFD, and U+2028/U+2029 are escaped so a line is safe to
// embed in JavaScript too (as encoding/json does). Paths and hosts come from the sandbox,
// so this is what keeps a hostile request from forging or breaking audit lines.
func refAppendString(b []byte, s string) []byte {
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

// refAppendLLM appends the model-call fields of e (kind llm); they are left out when e is not
// a model call.
func (e Event) refAppendLLM(b []byte) []byte {
	if e.Kind != KindLLM {
		return b
	}
	b = refAppendField(b, "model", e.Model, false)
	b = refAppendField(b, "provider", e.Provider, false)
	b = append(b, `,"input_tokens":`...)
	b = strconv.AppendInt(b, e.InputTokens, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, e.OutputTokens, 10)
	b = append(b, `,"cost_usd":`...)
	b = strconv.AppendFloat(b, e.CostUSD, 'f', -1, 64)
	if e.OutputClamped > 0 {
		b = append(b, `,"output_clamped":`...)
		b = strconv.AppendInt(b, e.OutputClamped, 10)
	}
	return refAppendField(b, "prompt", e.Prompt, false)
}

// refAppendTail closes a line begun by refAppendBody: its sequence number, the hash of the
// line before it, the logrus markers and the newline.
func refAppendTail(b []byte, seq uint64, prev *[32]byte) []byte {
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"prev":"`...)
	for _, c := range prev {
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	return append(b, `","level":"info","msg":"audit"}`+"\n"...)
}
