package crcline

import (
	"bytes"
	"testing"
)

type rec struct {
	A string `json:"a"`
	N int    `json:"n"`
}

// TestRoundTripAndTamper: a line decodes to what was encoded; a torn line, an edited value
// or an edited CRC does not decode.
func TestRoundTripAndTamper(t *testing.T) {
	line, err := Encode(rec{A: "x", N: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(line, []byte("\"}\n")) || !bytes.Contains(line, []byte(`"crc":"`)) {
		t.Fatalf("line %q", line)
	}
	body := bytes.TrimSuffix(line, []byte("\n"))
	var got rec
	if !Decode(body, &got) || got != (rec{A: "x", N: 7}) {
		t.Fatalf("Decode = %+v", got)
	}
	for name, bad := range map[string][]byte{
		"torn":        body[:len(body)-3],
		"value":       bytes.Replace(body, []byte(`"n":7`), []byte(`"n":8`), 1),
		"crc":         flipLastDigit(body),
		"no crc":      []byte(`{"a":"x","n":7}`),
		"empty":       nil,
		"crc not hex": bytes.Replace(body, body[len(body)-10:len(body)-2], []byte("zzzzzzzz"), 1),
	} {
		if Decode(bad, &got) {
			t.Errorf("%s line %q decoded", name, bad)
		}
	}
	if _, err := Encode(struct{}{}); err == nil {
		t.Error("Encode of an object without fields succeeded")
	}
	if _, err := Encode([]int{1}); err == nil {
		t.Error("Encode of a non-object succeeded")
	}
}

// flipLastDigit changes the CRC's last hex digit.
func flipLastDigit(body []byte) []byte {
	b := append([]byte(nil), body...)
	if i := len(b) - 3; b[i] == '0' {
		b[i] = '1'
	} else {
		b[i] = '0'
	}
	return b
}
