package llmproxy

import (
	"bytes"
	"encoding/base64"
	"image"
	_ "image/gif"  // image.DecodeConfig reads GIF sizes
	_ "image/jpeg" // and JPEG
	_ "image/png"  // and PNG
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Image sizing rules, as the providers publish them (OpenAI "Images and vision: calculating
// costs"; Anthropic "Vision: evaluate image size"). An image whose size airlock cannot read
// (a URL, a format it does not decode) is bounded by the largest image the rule allows.

// tileRule is OpenAI's tile rule: detail "low" costs base; otherwise the image is fitted
// within 2048×2048, then scaled so its shortest side is 768, and costs base + tile per
// 512-pixel tile.
type tileRule struct{ base, tile int64 }

// patchRule is OpenAI's patch rule (the mini and nano models): one token per 32-pixel patch,
// at most 1536 patches, times a per-model multiplier.
type patchRule struct{ mult float64 }

const (
	maxPatches = 1536
	// maxTiles is the most tiles the tile rule yields: 2048×768 after scaling, 4×2 tiles.
	maxTiles = 8
	// anthropicMaxImageTokens bounds one image for Claude: images are scaled to at most
	// about 1.15 megapixels, and cost width×height/750 tokens, about 1,600 at most.
	anthropicMaxImageTokens = 1600
)

// imageRuleFor returns the model's rule. An unknown model gets the dearest tile rule
// (gpt-4o-mini's) and the dearest patch rule, whichever is larger.
func imageRuleFor(model string) (tileRule, patchRule) {
	m := strings.ToLower(model)
	patches := []struct {
		prefix string
		mult   float64
	}{{"gpt-4.1-mini", 1.62}, {"gpt-4.1-nano", 2.46}, {"gpt-5-mini", 1.62}, {"gpt-5-nano", 2.46}, {"o4-mini", 1.72}}
	for _, p := range patches {
		if strings.HasPrefix(m, p.prefix) {
			return tileRule{}, patchRule{p.mult}
		}
	}
	tiles := []struct {
		prefix string
		rule   tileRule
	}{{"gpt-4o-mini", tileRule{2833, 5667}}, {"gpt-5", tileRule{70, 140}}, {"computer-use", tileRule{65, 129}},
		{"o1", tileRule{75, 150}}, {"o3", tileRule{75, 150}}, {"gpt-4o", tileRule{85, 170}}, {"chatgpt-4o", tileRule{85, 170}},
		{"gpt-4.1", tileRule{85, 170}}, {"gpt-4.5", tileRule{85, 170}}, {"gpt-4-turbo", tileRule{85, 170}}}
	for _, t := range tiles {
		if strings.HasPrefix(m, t.prefix) {
			return t.rule, patchRule{}
		}
	}
	return tileRule{2833, 5667}, patchRule{2.46}
}

// openaiImageTokens bounds one image part for an OpenAI model: url is the image URL or data
// URL, detail "low", "high", "auto" or "".
func openaiImageTokens(model, url, detail string) int64 {
	tr, pr := imageRuleFor(model)
	w, h, known := dataURLSize(url)
	var n int64
	if tr.tile > 0 {
		switch {
		case detail == "low":
			n = tr.base
		case known:
			n = tr.base + tr.tile*tiles(w, h)
		default:
			n = tr.base + tr.tile*maxTiles
		}
	}
	if pr.mult > 0 {
		p := int64(maxPatches)
		if known {
			p = min(p, patches(w, h))
		}
		n = max(n, int64(math.Ceil(float64(p)*pr.mult)))
	}
	return n
}

// tiles is the tile rule's tile count for a w×h image.
func tiles(w, h int) int64 {
	fw, fh := float64(w), float64(h)
	if fw > 2048 || fh > 2048 {
		s := 2048 / math.Max(fw, fh)
		fw, fh = fw*s, fh*s
	}
	if short := math.Min(fw, fh); short > 768 {
		s := 768 / short
		fw, fh = fw*s, fh*s
	}
	return int64(math.Ceil(fw/512) * math.Ceil(fh/512))
}

// patches is the patch rule's patch count for a w×h image, before the 1536 cap.
func patches(w, h int) int64 {
	return int64(math.Ceil(float64(w)/32) * math.Ceil(float64(h)/32))
}

// anthropicImageTokens bounds one Claude image from its base64 data ("" when not inline).
func anthropicImageTokens(b64 string) int64 {
	w, h, ok := imageSize(b64)
	if !ok {
		return anthropicMaxImageTokens
	}
	return min(anthropicMaxImageTokens, int64(math.Ceil(float64(w)*float64(h)/750)))
}

// dataURLSize reads the size of an image in a data: URL.
func dataURLSize(url string) (int, int, bool) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return 0, 0, false
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok || !strings.HasSuffix(meta, ";base64") {
		return 0, 0, false
	}
	return imageSize(data)
}

// imageSize decodes base64 image data far enough to read its size.
func imageSize(b64 string) (int, int, bool) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return 0, 0, false
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0, false
	}
	return cfg.Width, cfg.Height, true
}

// The PDF patterns are compiled on first use, not at every start.
var (
	pdfPageObj   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`/Type\s*/Page[^s]`) })
	pdfPageCount = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`/Type\s*/Pages\b[^>]*?/Count\s+(\d+)|/Count\s+(\d+)[^>]*?/Type\s*/Pages\b`)
	})
)

// pdfPages counts the pages of a base64 PDF (data URL or bare base64): the largest /Count of
// a page tree node, or the page objects when no count is readable. It fails for anything
// that is not a PDF or whose pages it cannot find (object streams can hide both).
func pdfPages(b64 string) (int64, bool) {
	if _, data, ok := strings.Cut(b64, ";base64,"); ok {
		b64 = data
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || !bytes.HasPrefix(raw, []byte("%PDF-")) {
		return 0, false
	}
	var n int64
	for _, m := range pdfPageCount().FindAllSubmatch(raw, -1) {
		for _, g := range m[1:] {
			if v, err := strconv.ParseInt(string(g), 10, 64); err == nil {
				n = max(n, v)
			}
		}
	}
	n = max(n, int64(len(pdfPageObj().FindAll(raw, -1))))
	return n, n > 0
}
