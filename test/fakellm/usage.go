package fakellm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	_ "image/png" // test images are PNGs
	"math"
	"strings"
)

// inputTokens is the input usage of a request: Config.InputTokens, or, with CountInput, the
// request counted as the real API counts it.
func (s *Server) inputTokens(req *request) int64 {
	if !s.cfg.CountInput {
		return s.cfg.InputTokens
	}
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		System json.RawMessage `json:"system"`
		Input  json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(req.raw, &body)
	n := int64(3)
	if len(body.System) > 0 {
		n += 3 + s.contentTokens(body.System)
	}
	if len(body.Input) > 0 {
		n += 3 + s.contentTokens(body.Input)
	}
	for _, m := range body.Messages {
		n += 3 + s.count(m.Role) + s.contentTokens(m.Content)
	}
	return n
}

// count is the o200k_base token count of a text.
func (s *Server) count(text string) int64 {
	n, _ := s.o200k().Count(text)
	return int64(n)
}

// contentTokens counts a content: a string, or parts of text and images.
func (s *Server) contentTokens(v json.RawMessage) int64 {
	var str string
	if json.Unmarshal(v, &str) == nil {
		return s.count(str)
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL struct {
			URL    string `json:"url"`
			Detail string `json:"detail"`
		} `json:"image_url"`
	}
	_ = json.Unmarshal(v, &parts)
	var n int64
	for _, p := range parts {
		switch p.Type {
		case "text", "input_text":
			n += s.count(p.Text)
		case "image_url":
			n += imageTokens(p.ImageURL.URL, p.ImageURL.Detail)
		}
	}
	return n
}

// imageTokens is gpt-4o's tile rule.
func imageTokens(url, detail string) int64 {
	if detail == "low" {
		return 85
	}
	_, data, _ := strings.Cut(url, ";base64,")
	raw, _ := base64.StdEncoding.DecodeString(data)
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		return 85 + 170*8 // the most tiles the rule allows
	}
	w, h := float64(cfg.Width), float64(cfg.Height)
	if w > 2048 || h > 2048 {
		f := 2048 / math.Max(w, h)
		w, h = w*f, h*f
	}
	if m := math.Min(w, h); m > 768 {
		w, h = w*768/m, h*768/m
	}
	return 85 + 170*int64(math.Ceil(w/512)*math.Ceil(h/512))
}
