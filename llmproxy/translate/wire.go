package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// obj is a JSON object whose fields are decoded on demand.
type obj map[string]json.RawMessage

// parseObj decodes raw as a JSON object; field names it in errors.
func parseObj(raw json.RawMessage, field string) (obj, error) {
	var o obj
	if err := json.Unmarshal(raw, &o); err != nil || o == nil {
		return nil, fieldErr(field, "must be a JSON object")
	}
	return o, nil
}

// has reports whether field k is present and not null.
func (o obj) has(k string) bool {
	v, ok := o[k]
	return ok && string(v) != "null"
}

// str decodes a string field; absent or null is "".
func (o obj) str(k, path string) (string, error) {
	if !o.has(k) {
		return "", nil
	}
	var s string
	if json.Unmarshal(o[k], &s) != nil {
		return "", fieldErr(join(path, k), "must be a string")
	}
	return s, nil
}

// decode decodes field k into v; absent or null leaves v alone.
func (o obj) decode(k, path string, v any, want string) error {
	if !o.has(k) {
		return nil
	}
	if json.Unmarshal(o[k], v) != nil {
		return fieldErr(join(path, k), "must be %s", want)
	}
	return nil
}

// isDefault reports whether field k is absent, null or exactly one of the JSON values
// given (the API's default, which translating may leave out).
func (o obj) isDefault(k string, defaults ...string) bool {
	if !o.has(k) {
		return true
	}
	v := string(bytes.TrimSpace(o[k]))
	return slices.Contains(defaults, v)
}

// rejectUnknown returns a *FieldError for the first field (in name order) that is present,
// not null, and neither in known nor at a default listed in defaults.
func (o obj) rejectUnknown(path string, known []string, defaults map[string][]string, why map[string]string) error {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(known, k) || !o.has(k) {
			continue
		}
		if d, ok := defaults[k]; ok && o.isDefault(k, d...) {
			continue
		}
		reason := why[k]
		if reason == "" {
			reason = "the provider's API has no equivalent; leave it out"
		}
		return fieldErr(join(path, k), "%s", reason)
	}
	return nil
}

// join builds a field path.
func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// idx builds an indexed field path.
func idx(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// marshal encodes v without HTML escaping (prompts keep their <, > and &).
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("translate: encode %T: %v", v, err)) // only our own types are encoded
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// rawJSON is marshal as a RawMessage.
func rawJSON(v any) json.RawMessage { return json.RawMessage(marshal(v)) }

// sse formats one server-sent event; name "" writes a data-only event (OpenAI chat).
func sse(name string, data []byte) []byte {
	var b []byte
	if name != "" {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// dataURL splits a data: URL holding base64 data into its media type and data.
func dataURL(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found {
		return "", "", false
	}
	mediaType, isB64 := strings.CutSuffix(meta, ";base64")
	if !isB64 || mediaType == "" {
		return "", "", false
	}
	return mediaType, data, true
}

// textOf joins the text of content given as a string or as an array of parts of the given
// text types; any other part is an error naming it.
func textOf(raw json.RawMessage, path string, textTypes ...string) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []obj
	if json.Unmarshal(raw, &parts) != nil {
		return "", fieldErr(path, "must be a string or an array of content parts")
	}
	var b strings.Builder
	for i, p := range parts {
		t, _ := p.str("type", "")
		if !slices.Contains(textTypes, t) {
			return "", fieldErr(idx(path, i)+".type", "a %q part cannot be carried here; only text", t)
		}
		text, err := p.str("text", idx(path, i))
		if err != nil {
			return "", err
		}
		b.WriteString(text)
	}
	return b.String(), nil
}
