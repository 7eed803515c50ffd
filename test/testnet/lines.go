//go:build linux

package testnet

import (
	"bytes"
	"context"
	"strings"
	"sync"
)

// Lines is an io.Writer that keeps what is written to it as lines and lets a test wait for a
// line it expects (a log message, an audit event). It is safe for concurrent use.
type Lines struct {
	// mu guards partial, lines and changed.
	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{} // closed and replaced on every new line
}

// NewLines returns an empty Lines.
func NewLines() *Lines { return &Lines{changed: make(chan struct{})} }

// Write implements io.Writer.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return len(p), nil
}

// All returns the complete lines written so far.
func (l *Lines) All() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// String returns everything written so far, including an unterminated last line.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.Join(l.lines, "\n")
	if len(l.lines) > 0 {
		s += "\n"
	}
	return s + string(l.partial)
}

// Wait blocks until a line at index from or later satisfies match, and returns it and its
// index. It returns ctx.Err() when ctx ends first.
func (l *Lines) Wait(ctx context.Context, from int, match func(string) bool) (string, int, error) {
	for {
		l.mu.Lock()
		for i := from; i < len(l.lines); i++ {
			if match(l.lines[i]) {
				line := l.lines[i]
				l.mu.Unlock()
				return line, i, nil
			}
		}
		if from < len(l.lines) {
			from = len(l.lines)
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return "", 0, ctx.Err()
		}
	}
}

// Len returns the number of complete lines written so far.
func (l *Lines) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}
