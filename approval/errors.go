package approval

import "errors"

// Sentinel errors of the store and the operator API.
var (
	// ErrNotFound: no ask or grant has that ID.
	ErrNotFound = errors.New("no such ask or grant")
	// ErrAnswered: the ask was answered already (granted or denied).
	ErrAnswered = errors.New("ask already answered")
	// ErrScope: the scope asked for is not allowed by the policy (a duration over maxGrant,
	// sandbox life without sandboxGrants) or is malformed.
	ErrScope = errors.New("scope not allowed")
	// ErrNotOperator: the peer of the operator socket is not the sidecar's user or root.
	ErrNotOperator = errors.New("not the operator")
	// ErrBadAnswer: a webhook answer that is unsigned, badly signed, replayed, stale or
	// malformed.
	ErrBadAnswer = errors.New("invalid webhook answer")
)
