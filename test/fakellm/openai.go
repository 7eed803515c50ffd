package fakellm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// created is the fixed "created" timestamp of every object.
const created = 1700000000

// sse writes server-sent events, flushing each one and, from the second on, waiting for the
// test's Step signal before writing it.
type sse struct {
	w        http.ResponseWriter
	r        *http.Request
	step     chan struct{}
	canceled chan struct{}
	count    int
}

func (s *Server) startSSE(w http.ResponseWriter, r *http.Request) *sse {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, r: r, step: s.Step, canceled: s.Canceled}
}

// send writes one event; name "" writes a data-only event. It returns false when the
// client went away.
func (e *sse) send(name string, data any) bool {
	if e.count > 0 && e.step != nil {
		select {
		case <-e.step:
		case <-e.r.Context().Done():
			if e.canceled != nil {
				e.canceled <- struct{}{}
			}
			return false
		}
	}
	e.count++
	var b []byte
	if s, ok := data.(string); ok {
		b = []byte(s)
	} else {
		b, _ = json.Marshal(data)
	}
	var out strings.Builder
	if name != "" {
		out.WriteString("event: " + name + "\n")
	}
	out.WriteString("data: ")
	out.Write(b)
	out.WriteString("\n\n")
	if _, err := e.w.Write([]byte(out.String())); err != nil {
		return false
	}
	e.w.(http.Flusher).Flush()
	return true
}

func chatUsage(in, out int64) map[string]any {
	return map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out,
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
}

// chat answers POST /v1/chat/completions: n choices of the reply, usage summed over them.
func (s *Server) chat(w http.ResponseWriter, r *http.Request, req *request) {
	words := s.words(req)
	n := max(1, req.N)
	in, out := s.inputTokens(req), n*int64(len(words))
	if !req.Stream {
		s.record(req.Model, in, out)
		choices := make([]any, n)
		for i := range choices {
			choices[i] = map[string]any{"index": i, "message": map[string]any{"role": "assistant",
				"content": strings.Join(words, ""), "refusal": nil, "annotations": []any{}},
				"logprobs": nil, "finish_reason": "stop"}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion", "created": created, "model": req.Model,
			"choices": choices, "usage": chatUsage(in, out), "service_tier": "default", "system_fingerprint": "fp_fake"})
		return
	}
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	chunk := func(i int64, delta map[string]any, finish any) map[string]any {
		c := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created,
			"model": req.Model, "service_tier": "default", "system_fingerprint": "fp_fake",
			"choices": []any{map[string]any{"index": i, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
		if withUsage {
			c["usage"] = nil
		}
		return c
	}
	e := s.startSSE(w, r)
	if !e.send("", chunk(0, map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)) {
		return
	}
	hang, err := strconv.Atoi(req.Metadata.FakeHangAfter)
	for j, wd := range words {
		if err == nil && j == hang {
			<-r.Context().Done() // a client that cuts the stream
			if e.canceled != nil {
				e.canceled <- struct{}{}
			}
			return
		}
		for i := range n {
			if !e.send("", chunk(i, map[string]any{"content": wd}, nil)) {
				return
			}
		}
	}
	for i := range n {
		if !e.send("", chunk(i, map[string]any{}, "stop")) {
			return
		}
	}
	s.record(req.Model, in, out)
	if withUsage {
		if !e.send("", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created,
			"model": req.Model, "service_tier": "default", "system_fingerprint": "fp_fake",
			"choices": []any{}, "usage": chatUsage(in, out)}) {
			return
		}
	}
	e.send("", "[DONE]")
}

// completion answers POST /v1/completions.
func (s *Server) completion(w http.ResponseWriter, r *http.Request, req *request) {
	words := s.words(req)
	in, out := s.inputTokens(req), int64(len(words))
	s.record(req.Model, in, out)
	usage := map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": "cmpl-fake", "object": "text_completion",
			"created": created, "model": req.Model, "choices": []any{map[string]any{"text": strings.Join(words, ""),
				"index": 0, "logprobs": nil, "finish_reason": "stop"}}, "usage": usage})
		return
	}
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	e := s.startSSE(w, r)
	for i, wd := range words {
		var finish any
		if i == len(words)-1 {
			finish = "stop"
		}
		c := map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"text": wd, "index": 0, "logprobs": nil, "finish_reason": finish}}}
		if withUsage {
			c["usage"] = nil
		}
		if !e.send("", c) {
			return
		}
	}
	if withUsage && !e.send("", map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": created,
		"model": req.Model, "choices": []any{}, "usage": usage}) {
		return
	}
	e.send("", "[DONE]")
}

// embeddings answers POST /v1/embeddings.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request, req *request) {
	in := s.inputTokens(req)
	s.record(req.Model, in, 0)
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "model": req.Model,
		"data":  []any{map[string]any{"object": "embedding", "index": 0, "embedding": []float64{0.1, -0.2, 0.3}}},
		"usage": map[string]any{"prompt_tokens": in, "total_tokens": in}})
}

// responses answers POST /v1/responses.
func (s *Server) responses(w http.ResponseWriter, r *http.Request, req *request) {
	words := s.words(req)
	in, out := s.inputTokens(req), int64(len(words))
	s.record(req.Model, in, out)
	text := strings.Join(words, "")
	usage := map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": in + out}
	msg := func(status, text string) map[string]any {
		content := []any{}
		if status == "completed" {
			content = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}
		}
		return map[string]any{"type": "message", "id": "msg_fake", "status": status, "role": "assistant", "content": content}
	}
	resp := func(status string, output []any, usage any) map[string]any {
		return map[string]any{"id": "resp_fake", "object": "response", "created_at": created, "status": status,
			"model": req.Model, "output": output, "usage": usage, "parallel_tool_calls": true, "tool_choice": "auto",
			"tools": []any{}, "temperature": 1.0, "top_p": 1.0, "text": map[string]any{"format": map[string]any{"type": "text"}},
			"error": nil, "incomplete_details": nil, "instructions": nil, "metadata": map[string]any{}}
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, resp("completed", []any{msg("completed", text)}, usage))
		return
	}
	e := s.startSSE(w, r)
	seq := 0
	send := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		return e.send(typ, fields)
	}
	ok := send("response.created", map[string]any{"response": resp("in_progress", []any{}, nil)}) &&
		send("response.in_progress", map[string]any{"response": resp("in_progress", []any{}, nil)}) &&
		send("response.output_item.added", map[string]any{"output_index": 0, "item": msg("in_progress", "")}) &&
		send("response.content_part.added", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	for _, wd := range words {
		ok = ok && send("response.output_text.delta", map[string]any{"item_id": "msg_fake", "output_index": 0,
			"content_index": 0, "delta": wd, "logprobs": []any{}})
	}
	_ = ok && send("response.output_text.done", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0,
		"text": text, "logprobs": []any{}}) &&
		send("response.content_part.done", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}) &&
		send("response.output_item.done", map[string]any{"output_index": 0, "item": msg("completed", text)}) &&
		send("response.completed", map[string]any{"response": resp("completed", []any{msg("completed", text)}, usage)})
}
