package node

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	c := NewConn(&buf)
	until := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	want := Request{ID: 7, Op: OpAllow, Addr: "198.18.0.10", Ports: []uint16{80, 443}, Until: until}
	if err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	var got Request
	if err := c.Read(&got); err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.Op != want.Op || got.Addr != want.Addr || len(got.Ports) != 2 || !got.Until.Equal(until) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestReadIsStrict(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"unknown field", `{"id":1,"op":"allow","open_everything":true}` + "\n", "unknown field"},
		{"trailing data", `{"id":1,"op":"allow"} {"id":2}` + "\n", "trailing data"},
		{"not JSON", "hello\n", "decode message"},
		{"too long", `{"id":1,"addr":"` + strings.Repeat("a", MaxMessage) + `"}` + "\n", "longer than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewConn(bytes.NewBufferString(tc.in))
			var r Request
			if err := c.Read(&r); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestWriteRefusesOversizedMessages(t *testing.T) {
	var buf bytes.Buffer
	err := NewConn(&buf).Write(Request{Addr: strings.Repeat("a", MaxMessage)})
	if err == nil || buf.Len() != 0 {
		t.Errorf("got %v with %d bytes written, want an error and nothing written", err, buf.Len())
	}
}
