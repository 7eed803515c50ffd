package policy

import (
	"strings"
)

// Method overrides (class: "method rules mean the method the server runs"). Many web
// frameworks let a request name the method they should run instead of the one on the request
// line: a header (X-HTTP-Method-Override in Google APIs, ASP.NET, Jersey; X-HTTP-Method in
// OData; X-Method-Override) or a parameter (_method in Rails, Laravel, Symfony, Express's
// method-override). A rule that allows only GET would otherwise carry a DELETE to such a
// server. Where a rule limits methods, any such request is denied: its mere presence, whatever
// its value, because the value a server reads cannot be predicted (case, repeats, spelling).

// overrideNames are the normalised names of method-override headers and parameters: lower
// case, with "-", ".", " ", "[" and "]" read as "_" (CGI and nginx map "-" and "_" of a header
// name to the same variable; PHP turns " ", "." and "[" in a parameter name into "_").
var overrideNames = []string{"_method", "x_http_method_override", "x_http_method", "x_method_override"}

// normaliseOverrideName lower-cases name, reads the separators a framework may equate as "_",
// and drops surrounding white space, control bytes and trailing "_" (so "_method[]" and
// "_method " are "_method").
func normaliseOverrideName(name string) string {
	n := strings.Map(func(r rune) rune {
		switch r {
		case '-', '.', ' ', '[', ']', '+':
			return '_'
		}
		return r
	}, strings.ToLower(strings.TrimFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f })))
	return strings.TrimRight(n, "_")
}

// isOverrideName reports whether a name is a method override once normalised. Every
// override name holds "method", and normalising never makes those letters (no other rune
// lower-cases to them), so a name without them in any case is none: most header names of a
// request are decided without normalising them (two allocations each).
func isOverrideName(name string) bool {
	if !containsMethodFold(name) {
		return false
	}
	return isNormalisedOverride(normaliseOverrideName(name))
}

// containsMethodFold reports whether s holds "method" in any ASCII case.
func containsMethodFold(s string) bool {
	const word = "method"
	for i := 0; i+len(word) <= len(s); i++ {
		j := 0
		for j < len(word) && s[i+j]|0x20 == word[j] {
			j++
		}
		if j == len(word) {
			return true
		}
	}
	return false
}

// isNormalisedOverride reports whether a normalised name is a method override.
func isNormalisedOverride(n string) bool {
	for _, o := range overrideNames {
		if n == o {
			return true
		}
	}
	// Other spellings of the same idea (X-Original-Method-Override, X-HTTP-Method-Override2).
	return strings.Contains(n, "method_override")
}

// IsMethodOverrideHeader reports whether a request header name asks a server to run another
// method: X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override or _method, in any case,
// with "-" or "_" between words, or any name containing "method-override".
func IsMethodOverrideHeader(name string) bool {
	return isOverrideName(name)
}

// queryOverride returns the name of the first method-override parameter in rawPath's query,
// as sent, or "". Names are percent-decoded until nothing changes (a server may decode a
// "%255Fmethod" twice), "+" is a space, and both "&" and ";" separate parameters.
func queryOverride(rawPath string) string {
	_, q, ok := strings.Cut(rawPath, "?")
	if !ok {
		return ""
	}
	q, _, _ = strings.Cut(q, "#")
	for _, part := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
		name, _, _ := strings.Cut(part, "=")
		n := name
		for range 8 {
			n = strings.ReplaceAll(n, "+", " ")
			d, _ := percentDecodeLoose(n)
			if d == n {
				break
			}
			n = d
		}
		if isOverrideName(n) {
			return name
		}
	}
	return ""
}

// FormMethodOverride returns the name of the first method-override parameter in an
// application/x-www-form-urlencoded body (Rails, Laravel and Symfony read _method there), as
// sent, or "". Names are read as in a query string.
func FormMethodOverride(body string) string { return queryOverride("?" + body) }

// percentDecodeLoose decodes every valid %XX escape of s and keeps anything else as it is.
func percentDecodeLoose(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, false
	}
	var b strings.Builder
	changed := false
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			changed = true
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String(), changed
}
