package credentials

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// chunked is a reader that returns its data in the given pieces.
type chunked struct{ parts [][]byte }

func (c *chunked) Read(p []byte) (int, error) {
	for len(c.parts) > 0 && len(c.parts[0]) == 0 {
		c.parts = c.parts[1:]
	}
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	return n, nil
}

func (c *chunked) Close() error { return nil }

func testReplacer() *Replacer {
	return newReplacer([]pattern{
		{find: []byte("s3cr3t-value"), with: []byte("[R]")},
		{find: []byte("s3cr3t"), with: []byte("[short]")},
		{find: []byte("abcabd"), with: []byte("[X]")},
	})
}

func TestReplacerBytes(t *testing.T) {
	r := testReplacer()
	for _, tc := range []struct{ name, in, want string }{
		{"none", "hello world", "hello world"},
		{"longest wins", "x s3cr3t-value y", "x [R] y"},
		{"shorter alone", "x s3cr3t y", "x [short] y"},
		{"adjacent", "s3cr3t-values3cr3t", "[R][short]"},
		{"overlapping prefix", "abcabcabd", "abc[X]"},
		{"at ends", "s3cr3t-value", "[R]"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.String(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestReplacerStreamEverySplit checks the streaming reader against the whole-buffer result
// for every split of the input into two and three chunks.
func TestReplacerStreamEverySplit(t *testing.T) {
	r := testReplacer()
	inputs := []string{
		"prefix s3cr3t-value middle s3cr3t end abcabcabd",
		"s3cr3t-value",
		"s3cr3",
		"aaas3cr3t-valu",
		"abcababcabdabcabd",
		"no secrets here at all",
	}
	for _, in := range inputs {
		want, _ := r.String(in)
		for i := 0; i <= len(in); i++ {
			for j := i; j <= len(in); j++ {
				src := &chunked{parts: [][]byte{[]byte(in[:i]), []byte(in[i:j]), []byte(in[j:])}}
				got, err := io.ReadAll(r.Reader(src))
				if err != nil || string(got) != want {
					t.Fatalf("split %q|%q|%q: got %q, %v; want %q", in[:i], in[i:j], in[j:], got, err, want)
				}
				// The length only sizes the buffer: right, short or long, the bytes are the same.
				for _, n := range []int64{int64(len(in)), 0, 1, int64(len(in)) + 100} {
					src := &chunked{parts: [][]byte{[]byte(in[:i]), []byte(in[i:j]), []byte(in[j:])}}
					got, err := io.ReadAll(r.ReaderOfLength(src, n))
					if err != nil || string(got) != want {
						t.Fatalf("split %q|%q|%q, length %d: got %q, %v; want %q", in[:i], in[i:j], in[j:], n, got, err, want)
					}
				}
			}
		}
		// One byte at a time, too.
		got, err := io.ReadAll(iotest.OneByteReader(r.Reader(io.NopCloser(strings.NewReader(in)))))
		if err != nil || string(got) != want {
			t.Fatalf("one byte reads of %q: got %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestReplacerFailPattern(t *testing.T) {
	errBad := errors.New("bad")
	r := newReplacer([]pattern{{find: []byte("airlock-placeholder:"), fail: errBad},
		{find: []byte("airlock-placeholder:ok:1"), with: []byte("VALUE")}})
	in := "a=airlock-placeholder:ok:1&b=airlock-placeholder:evil:2"
	for i := 0; i <= len(in); i++ {
		src := &chunked{parts: [][]byte{[]byte(in[:i]), []byte(in[i:])}}
		got, err := io.ReadAll(r.Reader(src))
		if !errors.Is(err, errBad) {
			t.Fatalf("split at %d: got err %v, want %v", i, err, errBad)
		}
		if string(got) != "a=VALUE&b=" {
			t.Fatalf("split at %d: got %q before the error, want %q", i, got, "a=VALUE&b=")
		}
	}
}

func FuzzReplacerStream(f *testing.F) {
	f.Add([]byte("x s3cr3t-value y s3cr3t abcabd"), uint8(3), uint8(7))
	f.Add([]byte("abcabcabd"), uint8(1), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, a, b uint8) {
		r := testReplacer()
		want, _ := r.Bytes(in)
		i, j := int(a)%(len(in)+1), int(b)%(len(in)+1)
		if i > j {
			i, j = j, i
		}
		src := &chunked{parts: [][]byte{bytes.Clone(in[:i]), bytes.Clone(in[i:j]), bytes.Clone(in[j:])}}
		got, err := io.ReadAll(r.Reader(src))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	})
}
