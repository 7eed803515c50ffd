package audit

import "strconv"

// appendLLM appends the model-call fields of e (kind llm; appendBody calls it for that kind
// only).
func (e *Event) appendLLM(b []byte) []byte {
	b = appendField(b, `,"model":`, e.Model, false)
	b = appendField(b, `,"provider":`, e.Provider, false)
	b = strconv.AppendInt(append(b, `,"input_tokens":`...), e.InputTokens, 10)
	b = strconv.AppendInt(append(b, `,"output_tokens":`...), e.OutputTokens, 10)
	b = strconv.AppendFloat(append(b, `,"cost_usd":`...), e.CostUSD, 'f', -1, 64)
	if e.OutputClamped > 0 {
		b = strconv.AppendInt(append(b, `,"output_clamped":`...), e.OutputClamped, 10)
	}
	return appendField(b, `,"prompt":`, e.Prompt, false)
}
