package llmproxy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// What a provider may produce. airlock reserves a call's output (limit × choices) before it
// sends it, so every field by which a caller can set or raise how much a provider produces
// must be seen: the standard ones (outputFields) and the ones self-hosted servers add under
// the openai-compatible type, at the top level or inside the parameter objects some servers
// read (Ollama's "options", TGI's "parameters", Gemini's "generationConfig", ...). A field is
// recognised by its name in any spelling (case, '_' and '-' ignored):
//
//   - an output maximum: max_tokens, max_completion_tokens, max_output_tokens, max_new_tokens,
//     n_predict (llama.cpp), num_predict (Ollama), max_length, maxOutputTokens, any
//     "max…token…", "max…len…", "max…predict…", "max…output…", "max…gen…"; it must be a
//     positive integer (llama.cpp and Ollama read -1 as "no limit"), no larger than the model's
//     cap, and it is clamped to what was reserved;
//   - an output minimum: min_tokens (vLLM), min_new_tokens, min_length; a positive integer,
//     clamped to what was reserved;
//   - a number of outputs: n, best_of, num_return_sequences, num_generations, candidate_count;
//     an integer from 1 to 128, reserved for;
//   - a switch that lets the server raise the limit itself (text-generation-webui's
//     auto_max_new_tokens): refused.
//
// Anything else named by no rule passes untouched, so the list errs wide: a field it
// recognises that a server does not know is clamped for nothing.

// limitKind is what a request field does to the output.
type limitKind int

const (
	limitNone limitKind = iota
	limitMax
	limitMin
	limitChoices
	limitRaises
)

// limitContainers are the objects some servers read generation parameters from (keys in
// canonical spelling). They are searched, recursively, for limit fields; other objects (the
// prompt, tools, JSON schemas with their maxLength) are not.
var limitContainers = map[string]bool{
	"options": true, "parameters": true, "generationconfig": true, "samplingparams": true,
	"extrabody": true, "google": true, "inferenceconfig": true, "generationparams": true, "config": true,
}

// maxLimitDepth bounds how deep limit containers are searched; deeper nesting is refused.
const maxLimitDepth = 6

// canonicalKey is a field name without case, '_' or '-'.
func canonicalKey(k string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '_' || r == '-':
			return -1
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return r
	}, k)
}

// kindOf classifies a field name.
func kindOf(key string) limitKind {
	k := canonicalKey(key)
	has := func(parts ...string) bool {
		for _, p := range parts {
			if strings.Contains(k, p) {
				return true
			}
		}
		return false
	}
	switch {
	case k == "automaxnewtokens":
		return limitRaises
	case k == "n" || k == "bestof" || k == "numreturnsequences" || k == "numgenerations" || k == "candidatecount":
		return limitChoices
	case k == "npredict" || k == "numpredict" || (strings.HasPrefix(k, "max") && has("token", "len", "predict", "output", "gen")):
		return limitMax
	case strings.HasPrefix(k, "min") && has("token", "len", "new", "output", "gen"):
		return limitMin
	}
	return limitNone
}

// limitRef is one limit field a call carries, by its path from the top of the body.
type limitRef struct {
	path []string
	kind limitKind
}

// name is the field's dotted path, for messages.
func (l limitRef) name() string { return strings.Join(l.path, ".") }

// scanLimits finds the limit fields of a call's body, checks their values and records them
// in c (maxOut, outField, stdOut, choices, limits).
func (c *call) scanLimits() *apiError {
	return c.scanObject(c.body, nil)
}

func (c *call) scanObject(obj map[string]json.RawMessage, path []string) *apiError {
	if len(path) > maxLimitDepth {
		return badRequest(fmt.Sprintf("%q nests generation parameters more than %d deep", strings.Join(path, "."), maxLimitDepth))
	}
	for k, v := range obj {
		p := append(path[:len(path):len(path)], k)
		if limitContainers[canonicalKey(k)] && len(v) > 0 && v[0] == '{' {
			var inner map[string]json.RawMessage
			if json.Unmarshal(v, &inner) != nil {
				return badRequest(fmt.Sprintf("%q must be an object", strings.Join(p, ".")))
			}
			if aerr := c.scanObject(inner, p); aerr != nil {
				return aerr
			}
			continue
		}
		if aerr := c.checkLimit(limitRef{path: p, kind: kindOf(k)}, v); aerr != nil {
			return aerr
		}
	}
	return nil
}

// checkLimit checks one field's value and records it.
func (c *call) checkLimit(ref limitRef, v json.RawMessage) *apiError {
	if ref.kind == limitNone || string(v) == "null" {
		return nil
	}
	if ref.kind == limitRaises {
		if string(v) == "false" || string(v) == "0" {
			return nil
		}
		return badRequest(fmt.Sprintf("%q lets the server raise the output limit beyond what airlock reserves; leave it out", ref.name()))
	}
	var n int64
	if json.Unmarshal(v, &n) != nil || n < 1 {
		if ref.kind == limitChoices {
			return badRequest(fmt.Sprintf("%q must be an integer from 1 to 128", ref.name()))
		}
		return badRequest(fmt.Sprintf("%q must be a positive integer (it sets how much the provider may produce)", ref.name()))
	}
	switch ref.kind {
	case limitChoices:
		if n > 128 {
			return badRequest(fmt.Sprintf("%q must be an integer from 1 to 128", ref.name()))
		}
		c.choices = max(c.choices, n)
		return nil
	case limitMax:
		if n > c.maxOut {
			c.maxOut, c.outField = n, ref.name()
		}
		if len(ref.path) == 1 && isOutputField(c.ep, ref.path[0]) {
			c.stdOut = true
		}
	}
	c.limits = append(c.limits, ref)
	return nil
}

// isOutputField reports whether f is one of the endpoint's standard output fields.
func isOutputField(ep endpoint, f string) bool {
	for _, s := range outputFields(ep) {
		if s == f {
			return true
		}
	}
	return false
}

// clampLimits lowers every limit field of body above limit to limit. Every limit container
// is written back re-encoded, so a key given twice (which servers resolve differently) is
// sent once, as airlock read it.
func (c *call) clampLimits(body map[string]json.RawMessage, limit int64) {
	for _, ref := range c.limits {
		setLimit(body, ref.path, limit)
	}
	reencodeContainers(body, 0)
}

// setLimit lowers the integer at path in obj to limit when it is larger.
func setLimit(obj map[string]json.RawMessage, path []string, limit int64) {
	v, ok := obj[path[0]]
	if !ok {
		return
	}
	if len(path) == 1 {
		var n int64
		if json.Unmarshal(v, &n) == nil && n > limit {
			obj[path[0]] = json.RawMessage(strconv.FormatInt(limit, 10))
		}
		return
	}
	var inner map[string]json.RawMessage
	if json.Unmarshal(v, &inner) != nil {
		return
	}
	setLimit(inner, path[1:], limit)
	obj[path[0]], _ = json.Marshal(inner)
}

// reencodeContainers re-encodes the limit containers of obj, recursively.
func reencodeContainers(obj map[string]json.RawMessage, depth int) {
	if depth > maxLimitDepth {
		return
	}
	for k, v := range obj {
		if !limitContainers[canonicalKey(k)] || len(v) == 0 || v[0] != '{' {
			continue
		}
		var inner map[string]json.RawMessage
		if json.Unmarshal(v, &inner) != nil {
			continue
		}
		reencodeContainers(inner, depth+1)
		obj[k], _ = json.Marshal(inner)
	}
}
