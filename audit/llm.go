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
