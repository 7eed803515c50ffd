package translate

// Stream translates a provider's server-sent event stream into the caller's dialect, one
// event at a time: every provider event yields at once the caller's events it implies
// (none, one or several), so nothing is held back. A Stream is not safe for concurrent use.
type Stream interface {
	// Event takes one provider event, its "event:" name ("" when it has none) and its
	// joined "data:" lines, and returns the caller's events for it, ready to write.
	Event(name string, data []byte) []byte
}

// StreamOptions tune a Stream.
type StreamOptions struct {
	// IncludeUsage sends the usage chunk an OpenAI Chat caller asked for with
	// stream_options.include_usage.
	IncludeUsage bool
	// Created is the Unix time reported in OpenAI chunks and Responses objects.
	Created int64
}

// NewStream returns the Stream translating provider events into caller events, or nil
// when the pair is not supported (see Supported).
func NewStream(provider, caller Dialect, opts StreamOptions) Stream {
	switch {
	case provider == AnthropicMessages && caller == OpenAIChat:
		return &messagesToChatStream{opts: opts, tools: map[int]int{}}
	case provider == OpenAIChat && caller == AnthropicMessages:
		return &chatToMessagesStream{tools: map[int]int{}, ids: map[int]string{}}
	case provider == AnthropicMessages && caller == OpenAIResponses:
		return newResponsesStream(opts)
	}
	return nil
}

// Request translates a request body from the caller's dialect to the provider's. It
// returns a *FieldError for a field that cannot be carried over faithfully.
func Request(caller, provider Dialect, body []byte, opts RequestOptions) ([]byte, error) {
	switch {
	case caller == OpenAIChat && provider == AnthropicMessages:
		return chatToMessages(body)
	case caller == AnthropicMessages && provider == OpenAIChat:
		return messagesToChat(body, opts)
	case caller == OpenAIResponses && provider == AnthropicMessages:
		return responsesToMessages(body)
	}
	return nil, fieldErr("model", "calls in the %s dialect cannot be translated to %s", caller, provider)
}

// Answer translates a provider's successful non-streamed answer into the caller's
// dialect; created is the Unix time to report where the caller's dialect has one.
func Answer(provider, caller Dialect, body []byte, created int64) ([]byte, error) {
	switch {
	case provider == AnthropicMessages && caller == OpenAIChat:
		return messagesToChatAnswer(body, created)
	case provider == OpenAIChat && caller == AnthropicMessages:
		return chatToMessagesAnswer(body)
	case provider == AnthropicMessages && caller == OpenAIResponses:
		return messagesToResponsesAnswer(body, created)
	}
	return nil, fieldErr("model", "answers in the %s dialect cannot be translated to %s", provider, caller)
}
