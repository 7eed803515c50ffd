package llmproxy

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tiktoken-go/tokenizer/codec"
)

// encoding is an OpenAI tokenizer vocabulary, or none (a model whose tokenizer airlock does
// not have: Anthropic's, which is not published, and OpenAI-compatible servers').
type encoding int

const (
	encNone encoding = iota
	encO200k
	encCl100k
)

// encodingFor returns the vocabulary of an OpenAI model by its upstream name (OpenAI's
// published mapping: o200k_base for GPT-4o, GPT-4.1, GPT-4.5, GPT-5 and the o-series;
// cl100k_base for GPT-4, GPT-3.5 and the text-embedding models).
func encodingFor(model string) encoding {
	m := strings.ToLower(model)
	for _, p := range []string{"gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "gpt-oss", "codex", "computer-use"} {
		if strings.HasPrefix(m, p) {
			return encO200k
		}
	}
	for _, p := range []string{"gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002"} {
		if strings.HasPrefix(m, p) {
			return encCl100k
		}
	}
	return encNone
}

// tokenizers holds the vocabularies, each loaded on first use: o200k_base costs about 12 MB
// of memory and 0.2 s to build, which an idle sidecar (or one whose calls fit by bytes) never
// pays. The codecs are safe for concurrent use once built.
type tokenizers struct {
	o200k  func() *codec.Codec
	cl100k func() *codec.Codec
	// loads counts the vocabularies built (for tests and the cost claim in docs/llm.md).
	loads atomic.Int32
}

func newTokenizers() *tokenizers {
	t := &tokenizers{}
	load := func(build func() *codec.Codec) func() *codec.Codec {
		return sync.OnceValue(func() *codec.Codec { t.loads.Add(1); return build() })
	}
	t.o200k, t.cl100k = load(codec.NewO200kBase), load(codec.NewCl100kBase)
	return t
}

// counter returns a function counting the tokens of a text in enc, or nil for encNone.
func (t *tokenizers) counter(enc encoding) func(string) int64 {
	var get func() *codec.Codec
	switch enc {
	case encO200k:
		get = t.o200k
	case encCl100k:
		get = t.cl100k
	default:
		return nil
	}
	return func(s string) int64 {
		if s == "" {
			return 0
		}
		n, err := get().Count(s)
		if err != nil {
			// Count fails only on a regexp timeout (none is set) or invalid UTF-8 in strict
			// mode (not set); fall back to the byte bound rather than guess.
			return int64(len(s))
		}
		return int64(n)
	}
}

// byteBound is the token bound of a text that is not counted: byte-level BPE tokenizers (every
// OpenAI one, and Claude's) never make a token of less than one byte of UTF-8.
func byteBound(s string) int64 { return int64(len(s)) }
