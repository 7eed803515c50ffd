package ship

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// Chain is one shipped chain read back from a store: its objects, downloaded into a local
// directory for audit.VerifyWith, and what the layout itself shows (missing objects, an
// open chain, deleted or overwritten versions).
type Chain struct {
	// Dir is the chain's key prefix in the store.
	Dir string
	// Segments and Checkpoints are the local files downloaded (in chain order);
	// Closed is the closing marker that ends the chain, nil while it is open.
	Segments    []string
	Checkpoints []string
	Closed      *Closing
	// FirstSeq and LastSeq are the range the segments hold.
	FirstSeq, LastSeq uint64
	// Head is the newest head marker (nil: none): how far the chain had gone when the
	// sidecar last reached the store. LastShipped is the newest object's time in the store.
	Head        *Head
	LastShipped time.Time
	// Missing names the objects missing from the chain (gaps between segments, a start
	// after seq 1); Tampered names objects whose content contradicts their name or whose
	// shipped version was overwritten; Notes lists what is not tampering but worth saying
	// (a delete marker over a version still there).
	Missing  []string
	Tampered []string
	Notes    []string
}

// Open reports whether no closing marker ends the chain at its last shipped seq.
func (c Chain) Open() bool { return c.Closed == nil }

// Fetch reads every chain under prefix in store into local directories under dir (one per
// chain) and checks the layout. With versions, each object is read at its oldest version
// (the one shipped), so a delete marker or a newer version written over it hides nothing.
func Fetch(ctx context.Context, store Store, prefix, dir string) ([]Chain, error) {
	versions, err := store.Versions(ctx, prefix)
	if err != nil {
		return nil, err
	}
	byChain := map[string][]Version{}
	var order []string
	for _, v := range versions {
		d := path.Dir(v.Key) + "/"
		if _, _, _, ok := nameKind(path.Base(v.Key)); !ok {
			continue
		}
		if _, seen := byChain[d]; !seen {
			order = append(order, d)
		}
		byChain[d] = append(byChain[d], v)
	}
	sort.Strings(order)
	var chains []Chain
	for i, d := range order {
		local := filepath.Join(dir, fmt.Sprintf("chain-%d", i+1))
		if err := os.MkdirAll(local, 0o700); err != nil {
			return nil, fmt.Errorf("fetch: %w", err)
		}
		c, err := fetchChain(ctx, store, d, byChain[d], local)
		if err != nil {
			return nil, err
		}
		chains = append(chains, c)
	}
	return chains, nil
}

// fetchChain downloads one chain's objects and checks its layout.
func fetchChain(ctx context.Context, store Store, dir string, vs []Version, local string) (Chain, error) {
	c := Chain{Dir: dir}
	type seg struct {
		name        string
		first, last uint64
	}
	var segs []seg
	var closings []Closing
	for _, v := range vs {
		if !v.DeleteMarker && v.Time.After(c.LastShipped) {
			c.LastShipped = v.Time
		}
	}
	for key, kv := range groupByKey(vs) {
		name := path.Base(key)
		kind, first, last, _ := nameKind(name)
		b, note, bad, err := readShipped(ctx, store, key, kv)
		if err != nil {
			return c, err
		}
		if note != "" {
			c.Notes = append(c.Notes, note)
		}
		if bad != "" {
			c.Tampered = append(c.Tampered, bad)
		}
		if b == nil {
			continue
		}
		switch kind {
		case "segment":
			if got, ok := audit.SegmentOf(b); !ok || got.First != first || got.Last != last {
				c.Tampered = append(c.Tampered, fmt.Sprintf("%s holds seq %d..%d, not the range its name says", key, got.First, got.Last))
			}
			segs = append(segs, seg{name, first, last})
		case "checkpoints":
			c.Checkpoints = append(c.Checkpoints, filepath.Join(local, name))
		case "closed":
			var cl Closing
			if err := json.Unmarshal(b, &cl); err != nil || !cl.Closed || cl.LastSeq != last {
				c.Tampered = append(c.Tampered, key+": not a closing marker of seq "+fmt.Sprint(last))
				continue
			}
			closings = append(closings, cl)
		case "head":
			var h Head
			if err := json.Unmarshal(b, &h); err != nil || h.Seq != last || h.ShippedSeq > h.Seq {
				c.Tampered = append(c.Tampered, key+": not a head marker of seq "+fmt.Sprint(last))
				continue
			}
			if c.Head == nil || h.Seq > c.Head.Seq {
				c.Head = &h
			}
		}
		if err := os.WriteFile(filepath.Join(local, name), b, 0o600); err != nil {
			return c, fmt.Errorf("fetch: %w", err)
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].first < segs[j].first })
	sort.Strings(c.Checkpoints)
	next := uint64(1)
	for _, s := range segs {
		if s.first > next {
			c.Missing = append(c.Missing, fmt.Sprintf("seq %d..%d: no object %s%s-... before %s", next, s.first-1, dir, segPrefix+pad(next), s.name))
		}
		next = max(next, s.last+1)
		c.Segments = append(c.Segments, filepath.Join(local, s.name))
	}
	if len(segs) > 0 {
		c.FirstSeq, c.LastSeq = segs[0].first, segs[len(segs)-1].last
	}
	c.close(closings)
	return c, nil
}

// close sets the closing marker that ends the chain at its last shipped seq, if any, and
// names a head marker past it as tampering.
func (c *Chain) close(closings []Closing) {
	for i := range closings {
		if closings[i].LastSeq == c.LastSeq {
			c.Closed = &closings[i]
		}
	}
	if c.Closed != nil && c.Head != nil && c.Head.Seq > c.Closed.LastSeq {
		c.Tampered = append(c.Tampered, fmt.Sprintf("%s%s says the chain reached seq %d, past its closing marker at seq %d", c.Dir, HeadName(c.Head.Seq), c.Head.Seq, c.Closed.LastSeq))
	}
}

// groupByKey groups versions (already in key order, oldest first) by key.
func groupByKey(vs []Version) map[string][]Version {
	out := map[string][]Version{}
	for _, v := range vs {
		out[v.Key] = append(out[v.Key], v)
	}
	return out
}

// readShipped reads the version of key that was shipped: the oldest that holds data. It
// returns a note for a delete marker (the data is still there), and a finding when a later
// version holds other bytes (an overwrite). b is nil when no version holds data.
func readShipped(ctx context.Context, store Store, key string, kv []Version) (b []byte, note, bad string, err error) {
	var data []Version
	deleted := false
	for _, v := range kv {
		if v.DeleteMarker {
			deleted = deleted || v.Latest
			continue
		}
		data = append(data, v)
	}
	if len(data) == 0 {
		return nil, "", "", nil
	}
	if b, err = store.Get(ctx, key, data[0].ID); err != nil {
		return nil, "", "", err
	}
	if deleted {
		note = fmt.Sprintf("%s: a delete marker hides it; read version %s, which is still stored", key, data[0].ID)
	}
	for _, v := range data[1:] {
		later, err := store.Get(ctx, key, v.ID)
		if err != nil {
			return nil, "", "", err
		}
		if sha256.Sum256(later) != sha256.Sum256(b) {
			bad = fmt.Sprintf("%s: version %s was written over the shipped version %s with other content", key, v.ID, data[0].ID)
		}
	}
	return b, note, bad, nil
}

// filterCheckpoints keeps the checkpoint lines of seq <= last: what is shipped with a
// segment must not sign lines still in the open file (verify would read them as cut off).
func filterCheckpoints(b []byte, last uint64) []byte {
	var out []byte
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		c, err := audit.ParseCheckpoint(line)
		if err == nil && c.Seq > last {
			continue
		}
		out = append(append(out, line...), '\n')
	}
	return out
}

// Verify checks the chain's downloaded segments and checkpoints with audit.VerifyWith.
func (c Chain) Verify(opt audit.VerifyOptions) (audit.Report, error) {
	return audit.VerifyWith(append(append([]string{}, c.Segments...), c.Checkpoints...), opt)
}

// Verdict sums up a chain and its report in one line: "intact, closed at seq N", "open,
// last shipped seq N", or what is missing or tampered (first). ok is true only for an
// intact, proven (with a key), closed chain with nothing missing.
func (c Chain) Verdict(rep audit.Report) (line string, ok bool) {
	switch {
	case len(c.Tampered) > 0:
		return "TAMPERED: " + c.Tampered[0], false
	case len(c.Missing) > 0:
		return "MISSING: " + strings.Join(c.Missing, "; "), false
	case !rep.Intact():
		return "TAMPERED: " + rep.Tampered.String(), false
	case rep.Unanchored != nil:
		return "UNANCHORED: " + rep.Unanchored.String(), false
	case c.Open():
		return c.openVerdict(), false
	}
	return fmt.Sprintf("intact, closed at seq %d (%d events in %d objects)", c.LastSeq, rep.Events, len(c.Segments)), true
}

// openVerdict names what an open chain lost, as far as the store knows: from the seq after
// the last one shipped to the newest head marker's seq (the sidecar had written that far),
// and that the end past it is recorded nowhere in the store.
func (c Chain) openVerdict() string {
	line := fmt.Sprintf("open, last shipped seq %d", c.LastSeq)
	if !c.LastShipped.IsZero() {
		line += " at " + c.LastShipped.UTC().Format(time.RFC3339)
	}
	if h := c.Head; h != nil && h.Seq > c.LastSeq {
		line += fmt.Sprintf("; not shipped: seq %d..%d (the sidecar reported at %s that the chain had reached seq %d) and whatever came after",
			c.LastSeq+1, h.Seq, h.Time.UTC().Format(time.RFC3339), h.Seq)
	} else {
		line += fmt.Sprintf("; not shipped: seq %d onward", c.LastSeq+1)
	}
	return line + "; no closing marker: lost with the pod's volume if the pod is gone (its sidecar could not ship its end; how far the chain went is recorded nowhere in the store), still to come if it runs"
}
