package proxy

import (
	"bytes"
	"errors"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		mask bool
	}{
		{"empty", 0, false}, {"7-bit length", 125, true}, {"16-bit length", 126, false},
		{"16-bit max", 0xffff, true}, {"64-bit length", 0x10000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := bytes.Repeat([]byte("x"), tc.size)
			b := encodeFrame(nil, wsBinary, payload, tc.mask)
			for cut := 0; cut < len(b); cut += max(1, len(b)/7) {
				if _, n, err := parseFrame(b[:cut], maxWSMessage); n != 0 || err != nil {
					t.Fatalf("a frame cut at %d parsed: %d, %v", cut, n, err)
				}
			}
			f, n, err := parseFrame(append(b, 0x81), maxWSMessage)
			if err != nil || n != len(b) || !f.fin || f.op != wsBinary || f.masked != tc.mask || !bytes.Equal(f.payload, payload) {
				t.Fatalf("got %+v size %d, %v; want the frame back (size %d)", f.op, n, err, len(b))
			}
		})
	}
	if _, _, err := parseFrame(encodeFrame(nil, wsText, make([]byte, 200), false), 100); !errors.Is(err, errWSProtocol) {
		t.Fatalf("an oversized frame got %v, want errWSProtocol", err)
	}
}

func TestAssembler(t *testing.T) {
	frame := func(fin bool, rsv, op byte, p string) wsFrame {
		return wsFrame{fin: fin, rsv: rsv, op: op, payload: []byte(p)}
	}
	var a wsAssembler
	if _, _, done, err := a.add(frame(false, 0, wsText, "ab")); done || err != nil {
		t.Fatalf("first fragment: done %v, %v", done, err)
	}
	if op, p, done, err := a.add(frame(true, 0, wsPing, "pi")); !done || err != nil || op != wsPing || string(p) != "pi" {
		t.Fatalf("a ping between fragments got %d %q %v %v", op, p, done, err)
	}
	if op, p, done, err := a.add(frame(true, 0, wsContinuation, "cd")); !done || err != nil || op != wsText || string(p) != "abcd" {
		t.Fatalf("last fragment got %d %q %v %v", op, p, done, err)
	}
	for _, tc := range []struct {
		name string
		f    []wsFrame
	}{
		{"reserved bits", []wsFrame{frame(true, 0x40, wsText, "x")}},
		{"continuation first", []wsFrame{frame(true, 0, wsContinuation, "x")}},
		{"message inside a message", []wsFrame{frame(false, 0, wsText, "x"), frame(true, 0, wsBinary, "y")}},
		{"fragmented control", []wsFrame{frame(false, 0, wsPing, "x")}},
		{"unknown opcode", []wsFrame{frame(true, 0, 0x3, "x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a wsAssembler
			var err error
			for _, f := range tc.f {
				if _, _, _, err = a.add(f); err != nil {
					break
				}
			}
			if !errors.Is(err, errWSProtocol) {
				t.Fatalf("got %v, want errWSProtocol", err)
			}
		})
	}
}

// FuzzParseFrame feeds untrusted bytes to the frame parser: it never panics, and a frame it
// parses encodes back to a frame with the same payload.
func FuzzParseFrame(f *testing.F) {
	f.Add(encodeFrame(nil, wsText, []byte("hello"), true))
	f.Add(encodeFrame(nil, wsBinary, make([]byte, 300), false))
	f.Add([]byte{0x81, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := parseFrame(b, 1<<16)
		if err != nil || n == 0 {
			return
		}
		if n > len(b) {
			t.Fatalf("size %d over input %d", n, len(b))
		}
		back, m, err := parseFrame(encodeFrame(nil, fr.op, fr.payload, fr.masked), 1<<16)
		if err != nil || m == 0 || !bytes.Equal(back.payload, fr.payload) {
			t.Fatalf("re-encoded frame did not parse back: %v", err)
		}
	})
}
