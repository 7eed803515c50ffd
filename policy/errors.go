package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Sentinel errors. Functions document which of them they may return; test with errors.Is.
var (
	// ErrInvalidPolicy marks every *LoadError about the content of a policy file (syntax,
	// schema, validation, inheritance). A file that cannot be read carries the I/O error
	// instead, so "absent" (fs.ErrNotExist) and "invalid" stay different errors.
	ErrInvalidPolicy = errors.New("invalid policy")
	// ErrInvalidHost is wrapped by NormalizeHost errors.
	ErrInvalidHost = errors.New("invalid host")
	// ErrInvalidPath is wrapped by NormalizePath errors.
	ErrInvalidPath = errors.New("invalid path")
	// ErrInvalidSecret is wrapped by Injection.Expand when a secret value cannot go into a
	// header.
	ErrInvalidSecret = errors.New("invalid secret value")
	// ErrInvalidUpstream is wrapped by ParseUpstream and ParseUpstreams errors.
	ErrInvalidUpstream = errors.New("invalid DNS upstream")
	// ErrUnknownProfile is returned by Builtin for a name that is not a built-in profile.
	ErrUnknownProfile = errors.New("unknown profile")
)

// LoadError is a policy error located in a file: it prints as "file:line:col: field: message".
// It unwraps to Err: ErrInvalidPolicy for a problem with the content, or the I/O error (for
// example one matching fs.ErrNotExist) when the file could not be read.
type LoadError struct {
	File    string // path as given to Load, or the name given to Parse
	Line    int    // 1-based; 0 when unknown
	Col     int    // 1-based; 0 when unknown
	Field   string // dotted path, e.g. "spec.egress[2].ports[0]"
	Message string // what is wrong and, where there is one, the fix
	Err     error  // ErrInvalidPolicy, or the I/O error that kept the file from being read
}

// Error prints "file:line:col: field: message", leaving out the parts that are unknown.
func (e *LoadError) Error() string {
	s := e.File
	if e.Line > 0 {
		s += fmt.Sprintf(":%d", e.Line)
		if e.Col > 0 {
			s += fmt.Sprintf(":%d", e.Col)
		}
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Message
}

// Unwrap returns Err.
func (e *LoadError) Unwrap() error { return e.Err }

// joinErrors sorts errs by file and position, drops exact duplicates and returns nil, the
// single error, or errors.Join of all of them.
func joinErrors(errs []*LoadError) error {
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *LoadError) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Col, b.Col), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Message, b.Message))
	})
	errs = slices.CompactFunc(errs, func(a, b *LoadError) bool { return *a == *b })
	if len(errs) == 1 {
		return errs[0]
	}
	joined := make([]error, len(errs))
	for i, e := range errs {
		joined[i] = e
	}
	return errors.Join(joined...)
}
