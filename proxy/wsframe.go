package proxy

// WebSocket framing (RFC 6455 section 5) for the relay in websocket.go: parsing frames
// from a byte buffer, assembling fragmented messages, and encoding a message as one frame.

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// WebSocket opcodes (RFC 6455 section 5.2).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xa
)

// maxWSMessage bounds a WebSocket message (all its fragments) the relay assembles to check
// and scrub it whole; a larger message ends the connection.
const maxWSMessage = 16 << 20

// maxWSControl is the largest control frame payload (RFC 6455 section 5.5).
const maxWSControl = 125

var errWSProtocol = errors.New("websocket protocol violation")

// wsFrame is one parsed frame, its payload unmasked.
type wsFrame struct {
	fin     bool
	rsv     byte
	op      byte
	masked  bool
	payload []byte
}

// parseFrame parses the frame at the start of b. It returns the frame and its size in b, or
// size 0 when b does not hold a whole frame yet. A payload over limit is an error.
func parseFrame(b []byte, limit int) (wsFrame, int, error) {
	var f wsFrame
	if len(b) < 2 {
		return f, 0, nil
	}
	f.fin, f.rsv, f.op = b[0]&0x80 != 0, b[0]&0x70, b[0]&0x0f
	f.masked = b[1]&0x80 != 0
	n, i := uint64(b[1]&0x7f), 2
	switch n {
	case 126:
		if len(b) < 4 {
			return f, 0, nil
		}
		n, i = uint64(binary.BigEndian.Uint16(b[2:4])), 4
	case 127:
		if len(b) < 10 {
			return f, 0, nil
		}
		n, i = binary.BigEndian.Uint64(b[2:10]), 10
	}
	if n > uint64(limit) {
		return f, 0, fmt.Errorf("websocket frame of %d bytes is over %d: %w", n, limit, errWSProtocol)
	}
	var key [4]byte
	if f.masked {
		if len(b) < i+4 {
			return f, 0, nil
		}
		copy(key[:], b[i:i+4])
		i += 4
	}
	if len(b) < i+int(n) {
		return f, 0, nil
	}
	f.payload = append([]byte(nil), b[i:i+int(n)]...)
	if f.masked {
		maskBytes(f.payload, key)
	}
	return f, i + int(n), nil
}

// maskBytes XORs b with the masking key (RFC 6455 section 5.3).
func maskBytes(b []byte, key [4]byte) {
	for i := range b {
		b[i] ^= key[i%4]
	}
}

// encodeFrame appends one final frame of opcode op carrying payload to dst, masked with a
// fresh random key when mask is set (frames a client sends must be masked, a server's not).
func encodeFrame(dst []byte, op byte, payload []byte, mask bool) []byte {
	dst = append(dst, 0x80|op)
	var m byte
	if mask {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		dst = append(dst, m|byte(n))
	case n <= 0xffff:
		dst = append(dst, m|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, m|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if !mask {
		return append(dst, payload...)
	}
	var key [4]byte
	_, _ = rand.Read(key[:]) // crypto/rand.Read never fails
	dst = append(dst, key[:]...)
	start := len(dst)
	dst = append(dst, payload...)
	maskBytes(dst[start:], key)
	return dst
}

// closePayload is a Close frame's payload: status code and reason.
func closePayload(code uint16, reason string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, code), reason...)
}

// wsAssembler joins the fragments of one direction's messages. Control frames, which may
// come between fragments, are returned at once.
type wsAssembler struct {
	active bool
	op     byte
	buf    []byte
}

// add takes frame f and returns a whole message (opcode and payload) when f completes one.
func (a *wsAssembler) add(f wsFrame) (op byte, payload []byte, done bool, err error) {
	if f.rsv != 0 { // no extension was negotiated (the proxy strips the offer)
		return 0, nil, false, fmt.Errorf("reserved bits set without an extension: %w", errWSProtocol)
	}
	switch f.op {
	case wsClose, wsPing, wsPong:
		if !f.fin || len(f.payload) > maxWSControl {
			return 0, nil, false, fmt.Errorf("fragmented or oversized control frame: %w", errWSProtocol)
		}
		return f.op, f.payload, true, nil
	case wsText, wsBinary:
		if a.active {
			return 0, nil, false, fmt.Errorf("new message inside a fragmented one: %w", errWSProtocol)
		}
		if f.fin {
			return f.op, f.payload, true, nil
		}
		a.active, a.op, a.buf = true, f.op, f.payload
		return 0, nil, false, nil
	case wsContinuation:
		if !a.active {
			return 0, nil, false, fmt.Errorf("continuation outside a message: %w", errWSProtocol)
		}
		if len(a.buf)+len(f.payload) > maxWSMessage {
			return 0, nil, false, fmt.Errorf("message over %d bytes: %w", maxWSMessage, errWSProtocol)
		}
		a.buf = append(a.buf, f.payload...)
		if !f.fin {
			return 0, nil, false, nil
		}
		op, payload = a.op, a.buf
		a.active, a.op, a.buf = false, 0, nil
		return op, payload, true, nil
	}
	return 0, nil, false, fmt.Errorf("unknown opcode %#x: %w", f.op, errWSProtocol)
}
