// Package crcline owns the line format of airlock's append-only ledgers (the model API's
// usage ledger, the usage meter's): one JSON object per line with a CRC-32C of that object
// appended as its last field, so that a torn or edited line is told apart from a good one and
// skipped, never half-read.
package crcline

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcPrefix opens the last field of a line: "crc", eight hex digits of the CRC-32C of the
// object without that field.
const crcPrefix = `,"crc":"`

// Encode is one line for v, which must marshal to a JSON object with at least one field: its
// JSON with "crc" appended, and a newline.
func Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode ledger line: %w", err)
	}
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' || len(b) == 2 {
		return nil, fmt.Errorf("encode ledger line: %T is not a JSON object with fields", v)
	}
	sum := crc32.Checksum(b, castagnoli)
	line := make([]byte, 0, len(b)+len(crcPrefix)+11)
	line = append(line, b[:len(b)-1]...)
	line = append(line, crcPrefix...)
	line = hex.AppendEncode(line, []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	return append(line, '"', '}', '\n'), nil
}

// Decode checks one line (without its newline) and unmarshals it into v; false when the CRC
// is missing, wrong or the JSON does not decode.
func Decode(line []byte, v any) bool {
	i := bytes.LastIndex(line, []byte(crcPrefix))
	if i < 0 || len(line) != i+len(crcPrefix)+8+2 || !bytes.HasSuffix(line, []byte(`"}`)) {
		return false
	}
	want, err := strconv.ParseUint(string(line[i+len(crcPrefix):i+len(crcPrefix)+8]), 16, 32)
	if err != nil {
		return false
	}
	body := append(append([]byte(nil), line[:i]...), '}')
	return uint64(crc32.Checksum(body, castagnoli)) == want && json.Unmarshal(body, v) == nil
}
