// Package fakellm is a model provider for tests: an http.Handler that speaks the OpenAI and
// Anthropic wire formats (paths, authentication, status codes, error bodies, SSE event names
// and order, "data: [DONE]", usage fields) without a model behind it. It stands in for the
// one thing the tests cannot run here, a real provider, and records what it received so that
// tests can check which headers (keys above all) reached it.
//
// Replies are deterministic: the reply text is Config.Reply split into words, one output
// token (and one stream delta) per word, capped by the request's max_tokens; input usage is
// Config.InputTokens. Only tests import this package.
package fakellm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tiktoken-go/tokenizer/codec"
)

// Flavor is the API a Server speaks.
type Flavor int

// The flavors.
const (
	OpenAI    Flavor = iota // Authorization: Bearer; /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/models
	Anthropic               // x-api-key and anthropic-version; /v1/messages, /v1/messages/count_tokens
)

// Config says how a Server answers. The zero value of every field but Key is usable.
type Config struct {
	// Flavor is the API spoken.
	Flavor Flavor
	// Key is the only API key accepted; any other gets the provider's 401.
	Key string
	// Reply is the reply text; empty means "Hello from the fake provider".
	Reply string
	// InputTokens is the input usage reported for every call; 0 means 12.
	InputTokens int64
	// IgnoreMaxTokens makes the server produce the whole reply whatever max_tokens says (a
	// misbehaving provider).
	IgnoreMaxTokens bool
	// EchoKeyInErrors puts the received key, in clear, in 401 error messages (the worst
	// provider), to test that airlock redacts it.
	EchoKeyInErrors bool
	// CountInput reports input usage as the real APIs count it instead of InputTokens: the
	// text's o200k_base tokens plus OpenAI's documented 3 tokens per message and 3 priming
	// the reply, and images by OpenAI's tile rule for gpt-4o (85 + 170 per 512-pixel tile;
	// the image must be a data URL the fake can size, or detail "low").
	CountInput bool
}

// Server is a fake provider. It is safe for concurrent use.
type Server struct {
	cfg Config

	// Step, when set, is received from before each stream event after the first one: the
	// test controls the pace of a stream without sleeping.
	Step chan struct{}
	// Hold, when set, is received from (or waited on until closed) before any answer.
	Hold chan struct{}
	// Arrived, when set, receives one value for each authenticated request, as it arrives.
	Arrived chan struct{}
	// Canceled, when set, receives one value each time a stream ends because the client
	// went away.
	Canceled chan struct{}

	o200k func() *codec.Codec

	calls    atomic.Int64 // requests that passed authentication
	inFlight atomic.Int64 // authenticated requests not yet answered
	maxIn    atomic.Int64 // highest inFlight seen

	// mu guards fail, seen and usage.
	mu    sync.Mutex
	fail  []int          // statuses to answer the next requests with, in order
	seen  []http.Header  // headers of every request received
	usage map[string]Use // usage reported, by model as received
}

// Use is the usage a Server reported for one model.
type Use struct {
	Calls         int64
	Input, Output int64
}

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.Reply == "" {
		cfg.Reply = "Hello from the fake provider"
	}
	if cfg.InputTokens == 0 {
		cfg.InputTokens = 12
	}
	return &Server{cfg: cfg, usage: make(map[string]Use), o200k: sync.OnceValue(codec.NewO200kBase)}
}

// FailNext makes the next len(statuses) authenticated requests answer with these statuses
// (429, 500, 503, 529 ...) in the provider's error format.
func (s *Server) FailNext(statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = append(s.fail, statuses...)
}

// Calls returns how many authenticated requests arrived.
func (s *Server) Calls() int64 { return s.calls.Load() }

// MaxInFlight returns the highest number of authenticated requests answered at once.
func (s *Server) MaxInFlight() int64 { return s.maxIn.Load() }

// InFlight returns the number of authenticated requests being answered now.
func (s *Server) InFlight() int64 { return s.inFlight.Load() }

// Headers returns the headers of every request received, in order.
func (s *Server) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.seen...)
}

// Usage returns the usage reported so far, by model as the provider received it.
func (s *Server) Usage() map[string]Use {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Use, len(s.usage))
	for k, v := range s.usage {
		out[k] = v
	}
	return out
}

// TotalUsage returns the sum of the usage reported over all models.
func (s *Server) TotalUsage() Use {
	var t Use
	for _, u := range s.Usage() {
		t.Calls += u.Calls
		t.Input += u.Input
		t.Output += u.Output
	}
	return t
}

func (s *Server) record(model string, in, out int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usage[model]
	u.Calls++
	u.Input += in
	u.Output += out
	s.usage[model] = u
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = append(s.seen, r.Header.Clone())
	s.mu.Unlock()
	if !s.authenticate(w, r) {
		return
	}
	s.calls.Add(1)
	n := s.inFlight.Add(1)
	if s.Arrived != nil {
		s.Arrived <- struct{}{}
	}
	defer s.inFlight.Add(-1)
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	if s.Hold != nil {
		select {
		case <-s.Hold:
		case <-r.Context().Done():
			return
		}
	}
	s.mu.Lock()
	var status int
	if len(s.fail) > 0 {
		status, s.fail = s.fail[0], s.fail[1:]
	}
	s.mu.Unlock()
	if status != 0 {
		s.error(w, status, "", fmt.Sprintf("injected failure %d", status))
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" && s.cfg.Flavor == OpenAI {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
		return
	}
	if r.Method != http.MethodPost {
		s.error(w, http.StatusMethodNotAllowed, "", "method not allowed")
		return
	}
	var req request
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	req.raw = body
	if err != nil {
		s.error(w, http.StatusBadRequest, "", "could not parse the JSON body of your request")
		return
	}
	if req.Model == "" {
		s.error(w, http.StatusBadRequest, "model", "you must provide a model parameter")
		return
	}
	s.route(w, r, &req)
}

// route dispatches by flavor and path.
func (s *Server) route(w http.ResponseWriter, r *http.Request, req *request) {
	switch {
	case s.cfg.Flavor == OpenAI && r.URL.Path == "/v1/chat/completions":
		s.chat(w, r, req)
	case s.cfg.Flavor == OpenAI && r.URL.Path == "/v1/completions":
		s.completion(w, r, req)
	case s.cfg.Flavor == OpenAI && r.URL.Path == "/v1/embeddings":
		s.embeddings(w, r, req)
	case s.cfg.Flavor == OpenAI && r.URL.Path == "/v1/responses":
		s.responses(w, r, req)
	case s.cfg.Flavor == Anthropic && r.URL.Path == "/v1/messages":
		s.messages(w, r, req)
	case s.cfg.Flavor == Anthropic && r.URL.Path == "/v1/messages/count_tokens":
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": s.inputTokens(req)})
	default:
		s.error(w, http.StatusNotFound, "", "Invalid URL ("+r.Method+" "+r.URL.Path+")")
	}
}

// request holds the request fields the fake looks at.
type request struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	MaxTokens           int64  `json:"max_tokens"`
	MaxCompletionTokens int64  `json:"max_completion_tokens"`
	MaxOutputTokens     int64  `json:"max_output_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// N is the number of choices (chat).
	N int64 `json:"n"`
	// Metadata.FakeHangAfter, when set ("3"), makes a chat stream send that many words and
	// then wait for the client to go away; nothing is recorded for it.
	Metadata struct {
		FakeHangAfter string `json:"fake_hang_after"`
	} `json:"metadata"`
	raw []byte
}

// words returns the reply split into stream deltas, capped by the request's output limit.
func (s *Server) words(req *request) []string {
	ws := strings.SplitAfter(s.cfg.Reply, " ")
	limit := max(req.MaxTokens, req.MaxCompletionTokens, req.MaxOutputTokens)
	if limit > 0 && int64(len(ws)) > limit && !s.cfg.IgnoreMaxTokens {
		ws = ws[:limit]
	}
	return ws
}

// authenticate checks the key the flavor's way and answers 401 (or 400) when it fails.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) bool {
	var got string
	if s.cfg.Flavor == OpenAI {
		got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if got == s.cfg.Key && got != "" {
			return true
		}
		msg := "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."
		if s.cfg.EchoKeyInErrors {
			msg = "Incorrect API key provided: " + got + ". You can find your API key at https://platform.openai.com/account/api-keys."
		}
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{
			"message": msg, "type": "invalid_request_error", "param": nil, "code": "invalid_api_key"}})
		return false
	}
	got = r.Header.Get("X-Api-Key")
	if got != s.cfg.Key || got == "" || r.Header.Get("Authorization") != "" {
		msg := "invalid x-api-key"
		if s.cfg.EchoKeyInErrors {
			msg = "invalid x-api-key " + got
		}
		anthropicError(w, http.StatusUnauthorized, "authentication_error", msg)
		return false
	}
	if r.Header.Get("Anthropic-Version") == "" {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return false
	}
	return true
}

// error answers status in the flavor's error format.
func (s *Server) error(w http.ResponseWriter, status int, param, msg string) {
	if s.cfg.Flavor == Anthropic {
		anthropicError(w, status, anthropicType(status), msg)
		return
	}
	typ, code := "invalid_request_error", any(nil)
	switch {
	case status == http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
		w.Header().Set("Retry-After", "0")
	case status >= 500:
		typ = "server_error"
	}
	var p any
	if param != "" {
		p = param
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": code}})
}

// anthropicType maps a status to the Anthropic error type.
func anthropicType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Request-Id", "req_fake")
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "0")
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg},
		"request_id": "req_fake"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
