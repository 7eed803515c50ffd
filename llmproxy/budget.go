package llmproxy

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// Budget is the sandbox's spending state: what the ledger says was used, what calls in flight
// have reserved, and the last minute's requests and tokens. Reserve and Settle are the only
// ways to change it, under one mutex, so concurrent calls can never together reserve more
// than a cap allows. Money is counted in integer nano-dollars (nUSD): float sums drift.
type Budget struct {
	now func() time.Time

	// mu guards every field below.
	mu         sync.Mutex
	usedTokens int64
	usedNano   int64
	heldTokens int64 // reserved by calls in flight
	heldNano   int64
	heldTPM    int64         // tokens reserved by calls in flight, counted against tokensPerMinute
	window     []windowEntry // requests and settled tokens of the last minute, oldest first
}

// windowEntry is one request start (req) or one settled usage (tokens) in the minute window.
type windowEntry struct {
	at     time.Time
	req    bool
	tokens int64
}

// rateWindow is the span of the per-minute caps.
const rateWindow = time.Minute

// Hold is one call's reservation, settled exactly once.
type Hold struct {
	Tokens int64
	Nano   int64
	done   bool
}

// NewBudget returns a Budget starting from used tokens and nano-dollars (the ledger's
// totals) and the recent usage entries of the last minute.
func NewBudget(now func() time.Time, usedTokens, usedNano int64) *Budget {
	if now == nil {
		now = time.Now
	}
	return &Budget{now: now, usedTokens: usedTokens, usedNano: usedNano}
}

// nanoCap converts a USD cap to nano-dollars, rounding down (a cap is never exceeded).
func nanoCap(usd float64) int64 {
	return int64(math.Floor(usd * 1e9))
}

// costNano is the cost of in input and out output tokens at price p, rounded up.
func costNano(p policy.Price, in, out int64) int64 {
	return int64(math.Ceil(float64(in)*p.InputPerMTok*1e3 + float64(out)*p.OutputPerMTok*1e3))
}

// Reserve reserves tokens and nano-dollars for one call under caps, and counts the request
// in the minute window. It returns a *BudgetError (ErrBudgetExhausted or ErrRateLimited)
// when a cap refuses it; then nothing is reserved.
func (b *Budget) Reserve(caps policy.Budget, tokens, nano int64) (*Hold, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.prune(now)
	if caps.Tokens > 0 && b.usedTokens+b.heldTokens+tokens > caps.Tokens {
		return nil, &BudgetError{Err: ErrBudgetExhausted, Cap: "tokens", Message: fmt.Sprintf(
			"airlock: the sandbox's token budget is exhausted: this call reserves %d tokens (input bytes + output limit), %d of %d remain (%d reserved by calls in flight); lower max_tokens or raise llm.budget.tokens",
			tokens, max(0, caps.Tokens-b.usedTokens-b.heldTokens), caps.Tokens, b.heldTokens)}
	}
	if c := nanoCap(caps.USD); caps.USD > 0 && b.usedNano+b.heldNano+nano > c {
		return nil, &BudgetError{Err: ErrBudgetExhausted, Cap: "usd", Message: fmt.Sprintf(
			"airlock: the sandbox's USD budget is exhausted: this call reserves $%.6f, $%.6f of $%.2f remain; lower max_tokens or raise llm.budget.usd",
			float64(nano)/1e9, float64(max(0, c-b.usedNano-b.heldNano))/1e9, caps.USD)}
	}
	if caps.RequestsPerMinute > 0 {
		n, oldest := 0, time.Time{}
		for _, e := range b.window {
			if e.req {
				if n == 0 {
					oldest = e.at
				}
				n++
			}
		}
		if n >= caps.RequestsPerMinute {
			return nil, &BudgetError{Err: ErrRateLimited, Cap: "requestsPerMinute", RetryAfter: oldest.Add(rateWindow).Sub(now),
				Message: fmt.Sprintf("airlock: rate limit of %d requests per minute reached; retry later", caps.RequestsPerMinute)}
		}
	}
	if caps.TokensPerMinute > 0 {
		if tokens > caps.TokensPerMinute {
			return nil, &BudgetError{Err: ErrBudgetExhausted, Cap: "tokensPerMinute", Message: fmt.Sprintf(
				"airlock: this call reserves %d tokens, more than the %d tokens per minute the sandbox may use; lower max_tokens or shorten the input",
				tokens, caps.TokensPerMinute)}
		}
		used := b.heldTPM
		for _, e := range b.window {
			used += e.tokens
		}
		if over := used + tokens - caps.TokensPerMinute; over > 0 {
			retry := rateWindow
			var freed int64
			for _, e := range b.window {
				freed += e.tokens
				if freed >= over {
					retry = e.at.Add(rateWindow).Sub(now)
					break
				}
			}
			return nil, &BudgetError{Err: ErrRateLimited, Cap: "tokensPerMinute", RetryAfter: retry,
				Message: fmt.Sprintf("airlock: rate limit of %d tokens per minute reached (this call reserves %d); retry later",
					caps.TokensPerMinute, tokens)}
		}
	}
	b.heldTokens += tokens
	b.heldNano += nano
	b.heldTPM += tokens
	b.window = append(b.window, windowEntry{at: now, req: true})
	return &Hold{Tokens: tokens, Nano: nano}, nil
}

// Settle releases h and charges the real usage instead. Settling twice is a no-op.
func (b *Budget) Settle(h *Hold, tokens, nano int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h == nil || h.done {
		return
	}
	h.done = true
	b.heldTokens -= h.Tokens
	b.heldNano -= h.Nano
	b.heldTPM -= h.Tokens
	b.usedTokens += tokens
	b.usedNano += nano
	if tokens > 0 {
		b.window = append(b.window, windowEntry{at: b.now(), tokens: tokens})
	}
}

// prune drops window entries older than the window. Caller holds mu.
func (b *Budget) prune(now time.Time) {
	i := 0
	for i < len(b.window) && now.Sub(b.window[i].at) >= rateWindow {
		i++
	}
	if i > 0 {
		b.window = append(b.window[:0], b.window[i:]...)
	}
}

// restoreWindow puts usage settled at 'at' (from the ledger) back in the minute window.
func (b *Budget) restoreWindow(at time.Time, tokens int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.now().Sub(at) < rateWindow {
		b.window = append(b.window, windowEntry{at: at, req: true}, windowEntry{at: at, tokens: tokens})
	}
}

// BudgetState is a snapshot of a Budget.
type BudgetState struct {
	UsedTokens, UsedNano int64
	HeldTokens, HeldNano int64
}

// State returns a snapshot.
func (b *Budget) State() BudgetState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetState{UsedTokens: b.usedTokens, UsedNano: b.usedNano, HeldTokens: b.heldTokens, HeldNano: b.heldNano}
}
