package llmproxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/airlock-dev/airlock/llmproxy/translate"
	"github.com/airlock-dev/airlock/policy"
)

// maxEventBytes caps one server-sent event; a longer one ends the stream with an error.
const maxEventBytes = 16 << 20

// errEventTooLarge is returned by readEvent for an event over maxEventBytes.
var errEventTooLarge = errors.New("server-sent event too large")

// sseReader splits a text/event-stream into events (RFC: HTML Living Standard, "Server-sent
// events": lines end in LF, CR LF or CR... airlock accepts LF and CR LF, which every provider
// sends; an event ends at a blank line).
type sseReader struct {
	br  *bufio.Reader
	buf []byte
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 32<<10)}
}

// event is one parsed event: raw is every byte of it, blank line included, as received.
type event struct {
	raw  []byte
	name string
	data []byte
}

// next reads one event. At the end of the stream it returns io.EOF, or, when the stream
// ends in the middle of an event, that partial event and io.ErrUnexpectedEOF.
func (s *sseReader) next() (event, error) {
	s.buf = s.buf[:0]
	var ev event
	var data [][]byte
	for {
		line, err := s.br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			s.buf = append(s.buf, line...)
			if len(s.buf) > maxEventBytes {
				return event{}, errEventTooLarge
			}
			line, err = s.br.ReadSlice('\n')
		}
		start := len(s.buf)
		s.buf = append(s.buf, line...)
		if len(s.buf) > maxEventBytes {
			return event{}, errEventTooLarge
		}
		if err != nil {
			if len(s.buf) == 0 && errors.Is(err, io.EOF) {
				return event{}, io.EOF
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			ev.raw = s.buf
			return ev, err
		}
		// A line may have started in an earlier buffer-full chunk; find its real start.
		lineStart := bytes.LastIndexByte(s.buf[:start], '\n') + 1
		l := bytes.TrimRight(s.buf[lineStart:], "\r\n")
		if len(l) == 0 {
			if lineStart == 0 {
				// A blank line with no event before it: skip it, as the standard says.
				s.buf = s.buf[:0]
				continue
			}
			ev.raw = s.buf
			ev.data = bytes.Join(data, []byte("\n"))
			return ev, nil
		}
		field, value, _ := bytes.Cut(l, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.name = string(value)
		case "data":
			data = append(data, value)
		}
	}
}

// streamErrorEvent is a well-formed error event in the endpoint's format, ending a stream
// airlock cuts: OpenAI chat and completions get a data-only {"error":{...}} chunk (what the
// SDKs raise as a stream error), Responses and Anthropic an "event: error".
func streamErrorEvent(ep endpoint, e *apiError) []byte {
	var b []byte
	switch ep {
	case epMessages:
		b = append(b, "event: error\ndata: "...)
		body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{
			"type": translate.AnthropicErrorType(e.status), "message": e.message}})
		b = append(b, body...)
	case epResponses:
		b = append(b, "event: error\ndata: "...)
		body, _ := json.Marshal(map[string]any{"type": "error", "code": e.code, "message": e.message, "param": nil})
		b = append(b, body...)
	default:
		b = append(b, "data: "...)
		b = append(b, e.body(familyOpenAI)...)
	}
	return append(b, "\n\n"...)
}

// pumpResult is how a stream ended.
type pumpResult struct {
	meter     *streamMeter
	bytesDown int64
	firstByte bool
	// out is the output tokens counted in the events written to the caller.
	out int64
	// cut is the error event airlock ended the stream with, if it did.
	cut *apiError
	// err is a read error from upstream or a write error towards the caller.
	err error
}

// pump copies a provider's event stream to the caller one event at a time, flushing each,
// counting usage and the output it forwards (with count), dropping the usage chunk an OpenAI
// caller did not ask for, and cutting the stream with an error event when the output passes
// outLimit tokens over all choices (a provider ignoring the max_tokens airlock sent: the call
// would spend more than it reserved). onFirst is called before the first event is written
// (time to first token). kick is called after every read from upstream (the between-chunk
// watchdog).
func pump(w http.ResponseWriter, body io.Reader, c *call, outLimit int64, count func(string) int64, redact func([]byte) []byte, onFirst, kick func(), timedOut func() bool) pumpResult {
	rc := http.NewResponseController(w)
	res := pumpResult{meter: &streamMeter{ep: c.ep, wantUsage: c.wantUsage, count: count}}
	rd := newSSEReader(body)
	for {
		ev, err := rd.next()
		kick()
		// A translated stream cannot pass a partial event on: it ends with an error event.
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) || (err != nil && (len(ev.raw) == 0 || c.tr != nil)) {
			// After the stream's last event (message_stop, [DONE], response.completed) a
			// caller that hangs up is not an error: the call is complete. A translated
			// stream that ends without the provider's last event gets an error event even
			// at a clean EOF: the caller's SDK would otherwise wait for its own last event.
			if (!errors.Is(err, io.EOF) || c.tr != nil) && !res.meter.done {
				res.err = err
				res.cut = cutError(err, timedOut())
				res.bytesDown += writeCut(w, rc, c.callerEndpoint(), res.cut)
			}
			return res
		}
		if res.meter.observe(ev.name, ev.data) == drop {
			continue
		}
		if c.ep != epEmbeddings && outLimit > 0 && res.meter.deltas > outLimit && !res.meter.done {
			res.cut = &apiError{status: policy.ReasonBudgetExhausted.HTTPStatus(), code: "insufficient_quota", openaiType: "insufficient_quota", deny: true,
				message: fmt.Sprintf("airlock: stream cut: the provider sent more than the %d output tokens this call reserved from the sandbox's budget", outLimit)}
			res.bytesDown += writeCut(w, rc, c.callerEndpoint(), res.cut)
			return res
		}
		raw := c.outgoing(ev, res.meter.upstreamError, redact)
		if len(raw) == 0 {
			res.out += res.meter.last // nothing for the caller in this event (ping, block start)
			continue
		}
		if !res.firstByte {
			res.firstByte = true
			onFirst()
		}
		n, werr := w.Write(raw)
		res.bytesDown += int64(n)
		if werr == nil {
			werr = rc.Flush()
		}
		if werr == nil || n == len(raw) {
			res.out += res.meter.last
		}
		if werr != nil {
			res.err = fmt.Errorf("write to caller: %w", werr)
			return res
		}
		if err != nil { // the partial last event was passed on as received
			res.err = err
			return res
		}
	}
}

// cutError is the error event for a stream that broke.
func cutError(err error, timedOut bool) *apiError {
	if timedOut {
		return &apiError{status: http.StatusGatewayTimeout, code: "upstream_timeout", openaiType: "server_error",
			message: "airlock: the provider sent nothing for longer than its chunkTimeout; stream ended"}
	}
	return &apiError{status: http.StatusBadGateway, code: "upstream_error", openaiType: "server_error",
		message: "airlock: the provider's stream broke: " + err.Error()}
}

// writeCut writes e as the stream's last event and returns the bytes written.
func writeCut(w http.ResponseWriter, rc *http.ResponseController, ep endpoint, e *apiError) int64 {
	n, _ := w.Write(streamErrorEvent(ep, e))
	_ = rc.Flush()
	return int64(n)
}
