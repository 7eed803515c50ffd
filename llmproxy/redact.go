package llmproxy

import (
	"bytes"
	"regexp"
	"sync"
)

// redactedMark replaces a secret in anything passed on or logged.
const redactedMark = "[REDACTED]"

// redactKey removes key from b: the exact value, and the masked forms providers print in
// authentication errors ("sk-proj-abc...wxyz", "sk-abc***wxyz"), recognised as a token that
// starts with the key's first 8 characters. Short keys (< 8 bytes) are only removed whole.
func redactKey(b []byte, key string) []byte {
	if key == "" {
		return b
	}
	b = bytes.ReplaceAll(b, []byte(key), []byte(redactedMark))
	if len(key) < 8 {
		return b
	}
	head := []byte(key[:8])
	for {
		i := bytes.Index(b, head)
		if i < 0 {
			return b
		}
		j := i + len(head)
		for j < len(b) && !isDelimiter(b[j]) {
			j++
		}
		b = append(b[:i:i], append([]byte(redactedMark), b[j:]...)...)
	}
}

// isDelimiter ends a token a masked key is part of.
func isDelimiter(c byte) bool {
	return c == ' ' || c == '"' || c == '\'' || c == ',' || c == '\n' || c == '\r' || c == '\t' || c == '\\' || c == '}' || c == ']'
}

// credentialLike matches strings that look like credentials, removed from prompts before
// they are logged (policy llm.logPrompts); compiled on first use, not at every start.
var credentialLike = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(sk-[A-Za-z0-9_\-]{12,}|sk-ant-[A-Za-z0-9_\-]{12,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|(bearer|token|password|secret|api[_-]?key)(["']?\s*[:=]\s*["']?|\s+)[A-Za-z0-9_\-./+=]{8,})`)
})

// maxPromptLog caps the prompt text put in an audit event.
const maxPromptLog = 2048

// redactPrompt prepares prompt text for the audit log: keys and credential-like strings
// removed, then truncated.
func redactPrompt(s string, keys ...string) string {
	b := []byte(s)
	for _, k := range keys {
		b = redactKey(b, k)
	}
	b = credentialLike().ReplaceAll(b, []byte(redactedMark))
	if len(b) > maxPromptLog {
		b = append(b[:maxPromptLog:maxPromptLog], "…"...)
	}
	return string(b)
}
