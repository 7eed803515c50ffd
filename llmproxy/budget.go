package llmproxy

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// Budget is the sandbox's spending state: what the ledger says was used, what calls in flight
// have reserved, and the per-minute token buckets. Reserve and Settle are the only ways to
// change it, under one mutex, so concurrent calls can never together reserve more than a
// lifetime cap allows. Money is counted in integer nano-dollars (nUSD): float sums drift.
type Budget struct {
	now func() time.Time

	// mu guards every field below.
	mu         sync.Mutex
	usedTokens int64
	usedNano   int64
	heldTokens int64 // reserved by calls in flight
	heldNano   int64
	tpm        bucket // tokensPerMinute
	rpm        bucket // requestsPerMinute
}

// bucket is a token bucket whose capacity is a per-minute cap and which refills at cap per
// minute. Its level may go below zero (debt): a call larger than the cap is admitted when the
// bucket is full, and the bucket then refills from below zero.
type bucket struct {
	level float64
	at    time.Time
	cap   int64
	// debit is usage restored from the ledger before the capacity was known, taken from
	// the bucket when it is first filled.
	debit float64
}

// refill brings the bucket to now under capacity c (a changed cap keeps the level, at most
// the new cap).
func (k *bucket) refill(now time.Time, c int64) {
	if k.cap == 0 || k.at.IsZero() {
		k.level, k.at = float64(c)-k.debit, now
		k.debit = 0
	}
	k.cap = c
	if d := now.Sub(k.at); d > 0 {
		k.level += d.Seconds() * float64(c) / rateWindow.Seconds()
	}
	k.level = min(k.level, float64(c))
	k.at = now
}

// wait is how long until the bucket holds n (at most its capacity).
func (k *bucket) wait(n float64) time.Duration {
	need := min(n, float64(k.cap)) - k.level
	if need <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(need / float64(k.cap) * float64(rateWindow)))
}

// rateWindow is the span of the per-minute caps: a bucket refills from empty in it.
const rateWindow = time.Minute

// Ask is what one call asks of the budget.
type Ask struct {
	// In bounds the input tokens.
	In int64
	// Out is the output limit per choice; Choices the number of choices (0 with Out 0 for a
	// call without output, embeddings).
	Out, Choices int64
	// FixedOut is output billed whatever the limit (predicted outputs).
	FixedOut int64
	// Price is the dearest price among the route's candidates.
	Price policy.Price
	// Strict refuses instead of lowering Out or taking the tokensPerMinute bucket into debt
	// (the caller will retry with a tighter input count first).
	Strict bool
}

// tokens is the reservation for an output limit of out per choice.
func (a Ask) tokens(out int64) int64 { return a.In + a.FixedOut + a.Choices*out }

// Hold is one call's reservation, settled exactly once.
type Hold struct {
	Tokens int64
	Nano   int64
	// Out is the output limit granted per choice: Ask.Out, or less when clamped.
	Out  int64
	done bool
}

// NewBudget returns a Budget starting from used tokens and nano-dollars (the ledger's
// totals).
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

// Reserve reserves a call's worst case under caps and counts the request. The output limit
// is lowered to what the lifetime caps (tokens, usd) leave, unless a.Strict; only a call
// whose input alone does not fit is refused. It returns a *BudgetError (ErrBudgetExhausted
// or ErrRateLimited) when a cap refuses; then nothing is reserved.
func (b *Budget) Reserve(caps policy.Budget, a Ask) (*Hold, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out, err := b.lifetimeOut(caps, a)
	if err != nil {
		return nil, err
	}
	tokens := a.tokens(out)
	if caps.RequestsPerMinute > 0 {
		b.rpm.refill(now, int64(caps.RequestsPerMinute))
		if b.rpm.level < 1 {
			wait := b.rpm.wait(1)
			return nil, &BudgetError{Err: ErrRateLimited, Cap: "requestsPerMinute", RetryAfter: wait, Message: fmt.Sprintf(
				"airlock: rate limit reached: llm.budget.requestsPerMinute is %d; retry in %s", caps.RequestsPerMinute, roundUp(wait))}
		}
	}
	if caps.TokensPerMinute > 0 {
		b.tpm.refill(now, caps.TokensPerMinute)
		full := b.tpm.level >= float64(caps.TokensPerMinute)
		if float64(tokens) > b.tpm.level && (a.Strict || !full) {
			wait := b.tpm.wait(float64(tokens))
			return nil, &BudgetError{Err: ErrRateLimited, Cap: "tokensPerMinute", RetryAfter: wait, Message: fmt.Sprintf(
				"airlock: rate limit reached: llm.budget.tokensPerMinute is %d, this call may cost up to %d tokens and %d are available now; retry in %s",
				caps.TokensPerMinute, tokens, max(0, int64(b.tpm.level)), roundUp(wait))}
		}
	}
	if caps.RequestsPerMinute > 0 {
		b.rpm.level--
	}
	if caps.TokensPerMinute > 0 {
		b.tpm.level -= float64(tokens)
	}
	nano := costNano(a.Price, a.In, a.FixedOut+a.Choices*out)
	b.heldTokens += tokens
	b.heldNano += nano
	return &Hold{Tokens: tokens, Nano: nano, Out: out}, nil
}

// lifetimeOut is the output limit per choice the tokens and usd caps leave for a (a.Out
// when it fits). Caller holds mu.
func (b *Budget) lifetimeOut(caps policy.Budget, a Ask) (int64, error) {
	out := a.Out
	least := min(1, a.Out) // one output token per choice, or none for embeddings
	if caps.Tokens > 0 {
		left := caps.Tokens - b.usedTokens - b.heldTokens
		if a.Choices > 0 && a.tokens(out) > left {
			out = (left - a.In - a.FixedOut) / a.Choices
		}
		if a.tokens(max(out, least)) > left || (a.Strict && out < a.Out) {
			if b.heldTokens > 0 && a.tokens(least) <= caps.Tokens-b.usedTokens {
				return 0, heldError("tokens", b.heldTokens)
			}
			return 0, &BudgetError{Err: ErrBudgetExhausted, Cap: "tokens", Message: fmt.Sprintf(
				"airlock: the sandbox's token budget (llm.budget.tokens: %d) is exhausted: %d tokens are left and this call's input alone may cost up to %d; raise llm.budget.tokens or shorten the input",
				caps.Tokens, max(0, left), a.In+a.FixedOut)}
		}
	}
	if caps.USD > 0 {
		left := nanoCap(caps.USD) - b.usedNano - b.heldNano
		inCost := costNano(a.Price, a.In, a.FixedOut)
		perOut := a.Price.OutputPerMTok * 1e3 * float64(a.Choices)
		if perOut > 0 && costNano(a.Price, a.In, a.FixedOut+a.Choices*out) > left {
			out = min(out, int64(math.Floor(float64(left-inCost)/perOut)))
		}
		cost := func(o int64) int64 { return costNano(a.Price, a.In, a.FixedOut+a.Choices*o) }
		if cost(max(out, least)) > left || (a.Strict && out < a.Out) {
			if b.heldNano > 0 && cost(least) <= nanoCap(caps.USD)-b.usedNano {
				return 0, heldError("usd", b.heldTokens)
			}
			return 0, &BudgetError{Err: ErrBudgetExhausted, Cap: "usd", Message: fmt.Sprintf(
				"airlock: the sandbox's USD budget (llm.budget.usd: $%.2f) is exhausted: $%.6f is left and this call's input alone may cost up to $%.6f; raise llm.budget.usd or shorten the input",
				caps.USD, float64(max(0, left))/1e9, float64(inCost)/1e9)}
		}
	}
	return out, nil
}

// heldRetry is the Retry-After of a call refused only because calls in flight hold the rest
// of a lifetime cap: they settle to their real usage, usually far less, within seconds.
const heldRetry = time.Second

// heldError refuses a call that would fit the lifetime cap named by capName if the calls in
// flight released their reservations: a rate limit (429, retry), not exhaustion.
func heldError(capName string, held int64) *BudgetError {
	return &BudgetError{Err: ErrRateLimited, Cap: capName, RetryAfter: heldRetry, Message: fmt.Sprintf(
		"airlock: what is left of llm.budget.%s is reserved by calls in flight (%d tokens in all); they settle to their real usage when they end: retry in %s",
		capName, held, heldRetry)}
}

// roundUp renders a wait in whole seconds, rounded up (as Retry-After says it).
func roundUp(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// Settle releases h and charges the real usage instead: the lifetime totals and the
// tokensPerMinute bucket (which gets back what the call reserved and did not use). Settling
// twice is a no-op.
func (b *Budget) Settle(h *Hold, tokens, nano int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h == nil || h.done {
		return
	}
	h.done = true
	b.heldTokens -= h.Tokens
	b.heldNano -= h.Nano
	b.usedTokens += tokens
	b.usedNano += nano
	if b.tpm.cap > 0 {
		b.tpm.refill(b.now(), b.tpm.cap)
		b.tpm.level = min(b.tpm.level+float64(h.Tokens-tokens), float64(b.tpm.cap))
	}
}

// restoreWindow charges usage settled at 'at' (from the ledger) to the per-minute buckets:
// what of it has not refilled by now.
func (b *Budget) restoreWindow(at time.Time, tokens int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	left := 1 - b.now().Sub(at).Seconds()/rateWindow.Seconds()
	if left > 0 {
		b.tpm.debit += float64(tokens) * left
		b.rpm.debit += left
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
