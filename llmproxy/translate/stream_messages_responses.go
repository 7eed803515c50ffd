package translate

import (
	"encoding/json"
	"fmt"
)

// messagesToResponsesStream turns Anthropic Messages events into Responses events:
// message_start → response.created and response.in_progress; a text block → a message
// output item (output_item.added, content_part.added, output_text.delta each, then
// output_text.done, content_part.done, output_item.done); a tool_use block → a
// function_call item (function_call_arguments.delta each, then .done and output_item.done);
// message_stop → response.completed (response.incomplete when max_tokens ended it);
// error → an error event.
type messagesToResponsesStream struct {
	opts      StreamOptions
	seq       int
	id, model string
	items     []*respItem
	// blocks maps an Anthropic block index to its output index.
	blocks map[int]int
	stop   string
	usage  anthUsage
	done   bool
}

// newResponsesStream returns a Stream to a Responses caller.
func newResponsesStream(opts StreamOptions) Stream {
	return &messagesToResponsesStream{opts: opts, blocks: map[int]int{}}
}

// emit formats one Responses event, numbering it.
func (s *messagesToResponsesStream) emit(typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	return sse(typ, marshal(fields))
}

// object is the response object now.
func (s *messagesToResponsesStream) object(u *anthUsage) map[string]any {
	return responseObject(s.id, s.model, s.opts.Created, s.stop, s.items, u)
}

// Event implements Stream.
func (s *messagesToResponsesStream) Event(name string, data []byte) []byte {
	if s.done {
		return nil
	}
	var e anthEvent
	if json.Unmarshal(data, &e) != nil {
		return nil
	}
	if name == "" {
		name = e.Type
	}
	switch name {
	case "message_start":
		s.id, s.model, s.usage = respID(e.Message.ID), e.Message.Model, e.Message.Usage
		out := s.emit("response.created", map[string]any{"response": s.object(nil)})
		return append(out, s.emit("response.in_progress", map[string]any{"response": s.object(nil)})...)
	case "content_block_start":
		return s.startItem(&e)
	case "content_block_delta":
		return s.delta(&e)
	case "content_block_stop":
		return s.stopItem(e.Index)
	case "message_delta":
		e.mergeUsage(&s.usage)
		if e.Delta.StopReason != "" {
			s.stop = e.Delta.StopReason
		}
	case "message_stop":
		s.done = true
		if s.stop == "" {
			s.stop = "end_turn"
		}
		typ := "response.completed"
		if obj := s.object(&s.usage); obj["status"] == "incomplete" {
			typ = "response.incomplete"
		}
		return s.emit(typ, map[string]any{"response": s.object(&s.usage)})
	case "error":
		s.done = true
		var ae struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(data, &ae)
		return s.emit("error", map[string]any{"code": ae.Error.Type, "message": ae.Error.Message, "param": nil})
	}
	return nil
}

// startItem opens the output item of a text or tool_use block.
func (s *messagesToResponsesStream) startItem(e *anthEvent) []byte {
	var it *respItem
	switch e.ContentBlock.Type {
	case "text":
		it = &respItem{kind: "message", id: fmt.Sprintf("msg_%s_%d", s.id, e.Index)}
	case "tool_use":
		it = &respItem{kind: "function_call", id: "fc_" + e.ContentBlock.ID, callID: e.ContentBlock.ID, name: e.ContentBlock.Name}
		it.text.WriteString(e.ContentBlock.startInput())
	default:
		return nil
	}
	if _, dup := s.blocks[e.Index]; dup {
		return nil
	}
	n := len(s.items)
	s.items = append(s.items, it)
	s.blocks[e.Index] = n
	out := s.emit("response.output_item.added", map[string]any{"output_index": n, "item": it.json()})
	if it.kind == "message" {
		out = append(out, s.emit("response.content_part.added", map[string]any{"item_id": it.id, "output_index": n,
			"content_index": 0, "part": outputText("")})...)
		if e.ContentBlock.Text != "" {
			it.text.WriteString(e.ContentBlock.Text)
			out = append(out, s.emit("response.output_text.delta", map[string]any{"item_id": it.id, "output_index": n,
				"content_index": 0, "delta": e.ContentBlock.Text, "logprobs": []any{}})...)
		}
	}
	return out
}

// delta maps a text or input_json delta.
func (s *messagesToResponsesStream) delta(e *anthEvent) []byte {
	n, ok := s.blocks[e.Index]
	if !ok || s.items[n].done {
		return nil
	}
	it := s.items[n]
	switch {
	case e.Delta.Type == "text_delta" && it.kind == "message":
		it.text.WriteString(e.Delta.Text)
		return s.emit("response.output_text.delta", map[string]any{"item_id": it.id, "output_index": n,
			"content_index": 0, "delta": e.Delta.Text, "logprobs": []any{}})
	case e.Delta.Type == "input_json_delta" && it.kind == "function_call":
		it.text.WriteString(e.Delta.PartialJSON)
		return s.emit("response.function_call_arguments.delta", map[string]any{"item_id": it.id, "output_index": n,
			"delta": e.Delta.PartialJSON})
	}
	return nil
}

// stopItem closes the output item of block i.
func (s *messagesToResponsesStream) stopItem(i int) []byte {
	n, ok := s.blocks[i]
	if !ok || s.items[n].done {
		return nil
	}
	it := s.items[n]
	it.done = true
	var out []byte
	if it.kind == "message" {
		text := it.text.String()
		out = s.emit("response.output_text.done", map[string]any{"item_id": it.id, "output_index": n, "content_index": 0,
			"text": text, "logprobs": []any{}})
		out = append(out, s.emit("response.content_part.done", map[string]any{"item_id": it.id, "output_index": n,
			"content_index": 0, "part": outputText(text)})...)
	} else {
		if it.text.Len() == 0 {
			it.text.WriteString("{}")
		}
		out = s.emit("response.function_call_arguments.done", map[string]any{"item_id": it.id, "output_index": n,
			"arguments": it.text.String()})
	}
	return append(out, s.emit("response.output_item.done", map[string]any{"output_index": n, "item": it.json()})...)
}
