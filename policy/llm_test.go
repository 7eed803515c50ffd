package policy

import (
	"fmt"
	"strings"
	"testing"
)

func TestLLMFieldsValidation(t *testing.T) {
	const head = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: llm}
spec:
  llm:
    providers:
      openai: {baseURL: "https://api.openai.com"}
      anthropic: {baseURL: "https://api.anthropic.com"}
      local: {baseURL: "http://127.0.0.1:11434", type: %s, allowInternal: true, chunkTimeout: 30s, retries: %s}
    models:
      - {name: a, provider: openai, maxOutputTokens: %s, fallbacks: [%s]}
      - {name: b, provider: local}
      - {name: c, provider: anthropic}
`
	tests := []struct {
		name                           string
		typ, retries, maxOut, fallback string
		want                           string // "" = loads
	}{
		{"valid", "openai-compatible", "3", "1000", "b", ""},
		{"unknown type", "openia", "0", "0", "b", `spec.llm.providers.local.type: unknown provider type "openia"; did you mean "openai"?`},
		{"retries out of range", "openai-compatible", "11", "0", "b", "spec.llm.providers.local.retries: retries 11 out of range"},
		{"negative cap", "openai-compatible", "0", "-1", "b", "spec.llm.models[0].maxOutputTokens: must not be negative"},
		{"self fallback", "openai-compatible", "0", "0", "a", `cannot fall back to itself`},
		{"unknown fallback", "openai-compatible", "0", "0", "bb", `fallback "bb" is not a model of spec.llm.models`},
		{"other API", "openai-compatible", "0", "0", "c", `fallback "c" speaks the anthropic API, model "a" the openai API`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := fmt.Sprintf(head, tc.typ, tc.retries, tc.maxOut, tc.fallback)
			_, err := Parse("llm.yaml", []byte(src))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want it to load", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "llm.yaml:")):
				t.Errorf("got %v, want a file:line error containing %q", err, tc.want)
			}
		})
	}
}

func TestProviderEffectiveType(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Provider
		want ProviderType
	}{
		{"openai", Provider{}, ProviderOpenAI},
		{"anthropic", Provider{}, ProviderAnthropic},
		{"vllm", Provider{}, ProviderOpenAICompatible},
		{"claude", Provider{Type: ProviderAnthropic}, ProviderAnthropic},
	} {
		if got := tc.p.EffectiveType(tc.name); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
