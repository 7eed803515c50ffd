package policy

import (
	"fmt"
	"maps"
	"slices"
)

// This file checks the llm fields that drive the local model endpoint beyond names and
// prices: provider type and timeouts, per-model output caps and fallbacks.

// EffectiveType returns the provider's Type, or the type its name implies when Type is empty:
// "anthropic" for a provider named anthropic, "openai" for one named openai, else
// "openai-compatible".
func (p Provider) EffectiveType(name string) ProviderType {
	switch {
	case p.Type != "":
		return p.Type
	case name == "anthropic":
		return ProviderAnthropic
	case name == "openai":
		return ProviderOpenAI
	}
	return ProviderOpenAICompatible
}

// compileLLMExtras checks provider types, timeouts and retries, model output caps and that
// fallbacks name other models of the same document.
func compileLLMExtras(d *decoder, c LLMConfig) {
	for _, name := range slices.Sorted(maps.Keys(c.Providers)) {
		p, path := c.Providers[name], joinKey("spec.llm.providers", name)
		switch p.Type {
		case "", ProviderOpenAI, ProviderAnthropic, ProviderOpenAICompatible:
		default:
			types := []string{string(ProviderOpenAI), string(ProviderAnthropic), string(ProviderOpenAICompatible)}
			if s := suggest(string(p.Type), types); s != "" {
				d.errorf(path+".type", "unknown provider type %q; did you mean %q?", p.Type, s)
			} else {
				d.errorf(path+".type", "unknown provider type %q; use openai, anthropic or openai-compatible", p.Type)
			}
		}
		for field, v := range map[string]int64{"connectTimeout": int64(p.ConnectTimeout),
			"firstByteTimeout": int64(p.FirstByteTimeout), "chunkTimeout": int64(p.ChunkTimeout)} {
			if v < 0 {
				d.errorf(path+"."+field, "must not be negative; leave it out for the default")
			}
		}
		if p.Retries < -1 || p.Retries > 10 {
			d.errorf(path+".retries", "retries %d out of range; use 0 (the default, 2) to 10, or -1 for none", p.Retries)
		}
	}
	names := make([]string, 0, len(c.Models))
	for _, m := range c.Models {
		names = append(names, m.Name)
	}
	for i, m := range c.Models {
		path := joinIndex("spec.llm.models", i)
		if m.MaxOutputTokens < 0 {
			d.errorf(path+".maxOutputTokens", "must not be negative; leave it out for the default (%d)", DefaultMaxOutputTokens)
		}
		for j, f := range m.Fallbacks {
			fp := joinIndex(path+".fallbacks", j)
			switch {
			case f == m.Name:
				d.errorf(fp, "model %q cannot fall back to itself", f)
			case !slices.Contains(names, f):
				msg := fmt.Sprintf("fallback %q is not a model of spec.llm.models", f)
				if s := suggest(f, names); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
				d.errorf(fp, "%s", msg)
			case slices.Index(m.Fallbacks, f) != j:
				d.errorf(fp, "duplicate fallback %q", f)
			}
		}
	}
}

// validateFallbacks checks, with the merged providers, that a model and its fallbacks speak
// the same API: a caller of the OpenAI endpoints cannot be answered by the Messages API.
func validateFallbacks(d *decoder, models []Model, providers map[string]Provider) {
	apiOf := func(name string) (ProviderType, bool) {
		for _, m := range models {
			if m.Name == name {
				p, ok := providers[m.Provider]
				if !ok {
					return "", false
				}
				if p.EffectiveType(m.Provider) == ProviderAnthropic {
					return ProviderAnthropic, true
				}
				return ProviderOpenAI, true
			}
		}
		return "", false
	}
	for i, m := range models {
		own, ok := apiOf(m.Name)
		if !ok {
			continue
		}
		for j, f := range m.Fallbacks {
			if api, ok := apiOf(f); ok && api != own {
				d.errorf(joinIndex(joinIndex("spec.llm.models", i)+".fallbacks", j),
					"fallback %q speaks the %s API, model %q the %s API; a fallback must speak the same one",
					f, api, m.Name, own)
			}
		}
	}
}
