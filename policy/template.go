package policy

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// An inject value is literal text with `{{ secret "name" }}` placeholders, and
// `{{ basic "user" "name" }}` for HTTP Basic credentials (RFC 7617: base64 of
// "user:<secret value>"). This is not text/template: the actions there are cannot call
// anything, so a policy author cannot make the proxy do more than paste a secret.

// templatePart is a literal (secret == "") or a secret placeholder; with basic set, the
// placeholder stands for base64(user ":" value).
type templatePart struct {
	literal string
	secret  string
	basic   bool
	user    string
}

var (
	secretAction = regexp.MustCompile(`^\s*secret\s+("(?:[^"\\]|\\.)*")\s*$`)
	basicAction  = regexp.MustCompile(`^\s*basic\s+("(?:[^"\\]|\\.)*")\s+("(?:[^"\\]|\\.)*")\s*$`)
)

// parseTemplate splits an inject value into parts, or says what is wrong and the fix.
func parseTemplate(s string) ([]templatePart, string) {
	var parts []templatePart
	for s != "" {
		open := strings.Index(s, "{{")
		if end := strings.Index(s, "}}"); end >= 0 && (open < 0 || end < open) {
			return nil, `"}}" without "{{"; a placeholder is {{ secret "name" }}`
		}
		if open < 0 {
			parts = append(parts, templatePart{literal: s})
			break
		}
		if open > 0 {
			parts = append(parts, templatePart{literal: s[:open]})
		}
		rest := s[open+2:]
		end := strings.Index(rest, "}}")
		if end < 0 {
			return nil, `"{{" without "}}"; a placeholder is {{ secret "name" }}`
		}
		action := rest[:end]
		if b := basicAction.FindStringSubmatch(action); b != nil {
			user, uerr := strconv.Unquote(b[1])
			name, nerr := strconv.Unquote(b[2])
			switch {
			case uerr != nil || strings.Contains(user, ":"):
				return nil, fmt.Sprintf(`invalid basic user %s (no ":"); use {{ basic "user" "secret-name" }}`, b[1])
			case nerr != nil || name == "":
				return nil, fmt.Sprintf(`invalid secret name %s; use {{ basic "user" "secret-name" }}`, b[2])
			}
			parts = append(parts, templatePart{secret: name, basic: true, user: user})
			s = rest[end+2:]
			continue
		}
		m := secretAction.FindStringSubmatch(action)
		if m == nil {
			return nil, fmt.Sprintf(`unknown template syntax "{{%s}}"; use {{ secret "name" }}`, action)
		}
		name, err := strconv.Unquote(m[1])
		if err != nil || name == "" {
			return nil, fmt.Sprintf(`invalid secret name %s; use {{ secret "name" }}`, m[1])
		}
		parts = append(parts, templatePart{secret: name})
		s = rest[end+2:]
	}
	return parts, ""
}

// Secrets returns the names of the secrets the value refers to, in order of appearance,
// each once. It returns nil for a value that does not parse, which a loaded policy never has.
func (in Injection) Secrets() []string {
	parts, _ := parseTemplate(in.Value)
	var names []string
	for _, p := range parts {
		if p.secret != "" && !slices.Contains(names, p.secret) {
			names = append(names, p.secret)
		}
	}
	return names
}

// parsedTemplates memoises parseTemplate for the inject values of loaded policies, which
// are expanded on every intercepted request; it stops growing at maxParsedTemplates
// distinct values (policy reloads that keep changing them), past which values are parsed
// each time.
var parsedTemplates struct {
	sync.RWMutex
	m map[string]parsedTemplate
}

// parsedTemplate is one parseTemplate result.
type parsedTemplate struct {
	parts  []templatePart
	reason string
}

const maxParsedTemplates = 4096

// parseTemplateCached is parseTemplate through parsedTemplates. The parts are shared: read
// them only.
func parseTemplateCached(s string) ([]templatePart, string) {
	parsedTemplates.RLock()
	pt, ok := parsedTemplates.m[s]
	parsedTemplates.RUnlock()
	if ok {
		return pt.parts, pt.reason
	}
	parts, reason := parseTemplate(s)
	parsedTemplates.Lock()
	if parsedTemplates.m == nil {
		parsedTemplates.m = make(map[string]parsedTemplate)
	}
	if len(parsedTemplates.m) < maxParsedTemplates {
		parsedTemplates.m[s] = parsedTemplate{parts: parts, reason: reason}
	}
	parsedTemplates.Unlock()
	return parts, reason
}

// Expand returns the header value with each placeholder replaced by the secret's value from
// lookup. It returns lookup's error, wrapped with the secret name; or, for a value that does
// not parse (never the case in a loaded policy), an error wrapping ErrInvalidPolicy; or, for
// a secret value holding CR, LF or NUL, an error wrapping ErrInvalidSecret.
func (in Injection) Expand(lookup func(name string) (string, error)) (string, error) {
	parts, reason := parseTemplateCached(in.Value)
	if reason != "" {
		return "", fmt.Errorf("expand header %s: %s: %w", in.Header, reason, ErrInvalidPolicy)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.secret == "" {
			b.WriteString(p.literal)
			continue
		}
		v, err := lookup(p.secret)
		if err != nil {
			return "", fmt.Errorf("expand secret %q: %w", p.secret, err)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			// A newline in a header value would let a secret split the request (RFC 9110 §5.5).
			return "", fmt.Errorf("expand secret %q: value holds a newline or NUL: %w", p.secret, ErrInvalidSecret)
		}
		if p.basic {
			v = base64.StdEncoding.EncodeToString([]byte(p.user + ":" + v))
		}
		b.WriteString(v)
	}
	return b.String(), nil
}
