package fakellm

import (
	"net/http"
	"strings"
)

// messages answers POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request, req *request) {
	if req.MaxTokens <= 0 {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required")
		return
	}
	words := s.words(req)
	in, out := s.inputTokens(req), int64(len(words))
	s.record(req.Model, in, out)
	text := strings.Join(words, "")
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": "msg_fake", "type": "message", "role": "assistant",
			"model": req.Model, "content": []any{map[string]any{"type": "text", "text": text}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out,
				"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
		return
	}
	e := s.startSSE(w, r)
	ok := e.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": in, "output_tokens": 1,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}) &&
		e.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}}) &&
		e.send("ping", map[string]any{"type": "ping"})
	for _, wd := range words {
		ok = ok && e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": wd}})
	}
	_ = ok && e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) &&
		e.send("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": out}}) &&
		e.send("message_stop", map[string]any{"type": "message_stop"})
}
