package audit

import "strconv"

// appendLLM appends the model-call fields of e (kind llm); they are left out when e is not
// a model call.
func (e Event) appendLLM(b []byte) []byte {
	if e.Kind != KindLLM {
		return b
	}
	b = appendField(b, "model", e.Model, false)
	b = appendField(b, "provider", e.Provider, false)
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
	return appendField(b, "prompt", e.Prompt, false)
}

// llmObject adds the model-call fields of e to m, as appendLLM writes them.
func (e Event) llmObject(m map[string]any) {
	if e.Kind != KindLLM {
		return
	}
	for k, v := range map[string]string{"model": e.Model, "provider": e.Provider, "prompt": e.Prompt} {
		if v != "" {
			m[k] = v
		}
	}
	m["input_tokens"] = e.InputTokens
	m["output_tokens"] = e.OutputTokens
	m["cost_usd"] = e.CostUSD
	if e.OutputClamped > 0 {
		m["output_clamped"] = e.OutputClamped
	}
}
