package ship_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/ship"
	"github.com/airlock-dev/airlock/test/s3test"
)

// bucket makes a bucket on the real S3 test server (with Object Lock, which also turns
// versioning on, when lock is set) and returns a store on it.
func bucket(t *testing.T, srv *s3test.Server, name string, lock bool) *ship.S3Store {
	t.Helper()
	st, err := ship.NewS3Store(ship.S3Config{Bucket: name, Endpoint: srv.Endpoint, Region: s3test.Region,
		Credentials: func(context.Context) (string, string, string, error) { return srv.AccessKey, srv.SecretKey, "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	in := &s3.CreateBucketInput{Bucket: aws.String(name)}
	if lock {
		in.ObjectLockEnabledForBucket = aws.Bool(true)
	}
	if _, err := st.Client().CreateBucket(context.Background(), in); err != nil {
		t.Fatalf("create bucket %s: %v\n%s", name, err, srv.Stderr())
	}
	return st
}

// trail is one sidecar's audit log and its shipper.
type trail struct {
	t    *testing.T
	path string
	key  ed25519.PrivateKey
	log  *audit.Logger
	sh   *ship.Shipper
	cfg  ship.Config
	n    int
}

func newTrail(t *testing.T, store ship.Store, mod func(*ship.Config)) *trail {
	t.Helper()
	key, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tr := &trail{t: t, path: filepath.Join(t.TempDir(), "audit.log"), key: key}
	tr.cfg = ship.Config{Log: tr.path, Store: store, Prefix: "evidence", KeyPrefix: "ns1/pod-a/0d1c9a4e-uid",
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	if mod != nil {
		mod(&tr.cfg)
	}
	tr.start()
	return tr
}

// start opens the Logger (continuing the chain on the file) and the Shipper, as a sidecar
// (re)start does.
func (tr *trail) start() {
	tr.t.Helper()
	l, err := audit.New(audit.Options{Sandbox: "ns1.pod-a", Writer: io.Discard, File: tr.path, Key: tr.key,
		MaxBytes: 2048, SealOnClose: true})
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.log = l
	if tr.sh, err = ship.New(tr.cfg); err != nil {
		tr.t.Fatal(err)
	}
	if err := tr.sh.Open(); err != nil {
		tr.t.Fatal(err)
	}
}

// events commits n events (allowed and denied).
func (tr *trail) events(n int) {
	tr.t.Helper()
	for range n {
		tr.n++
		d := audit.DecisionAllow
		if tr.n%3 == 0 {
			d = audit.DecisionDeny
		}
		if err := tr.log.Commit(audit.Event{Kind: audit.KindHTTP, Decision: d, Destination: fmt.Sprintf("h%d.test:443", tr.n), Method: "GET", Path: "/x"}); err != nil {
			tr.t.Fatal(err)
		}
	}
}

// stop is SIGTERM: the Logger seals its tail, the Shipper ships it and the closing marker.
func (tr *trail) stop() {
	tr.t.Helper()
	if err := tr.log.Close(); err != nil {
		tr.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.sh.Finish(ctx); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *trail) pub() ed25519.PublicKey { return tr.key.Public().(ed25519.PublicKey) }

// fetchOne reads the store back and returns its one chain, verified with the key.
func fetchOne(t *testing.T, store ship.Store, pub ed25519.PublicKey) (ship.Chain, audit.Report) {
	t.Helper()
	chains, err := ship.Fetch(context.Background(), store, "evidence/", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(chains) != 1 {
		t.Fatalf("got %d chains, want 1", len(chains))
	}
	rep, err := chains[0].Verify(audit.VerifyOptions{Key: pub})
	if err != nil {
		t.Fatal(err)
	}
	return chains[0], rep
}

func TestShippedChainVerifiesAcrossARestartAndCloses(t *testing.T) {
	srv := s3test.Start(t)
	store := bucket(t, srv, "trail", false)
	tr := newTrail(t, store, nil)
	tr.events(40)
	if err := tr.sh.ShipSealed(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A crash: no Close, no seal. The next start continues the chain in the same file.
	tr.start()
	tr.events(40)
	tr.stop()

	c, rep := fetchOne(t, store, tr.pub())
	line, ok := c.Verdict(rep)
	if !ok {
		t.Fatalf("verdict %q, want intact and closed", line)
	}
	if rep.FirstSeq != 1 || rep.LastSeq != uint64(tr.n) || !rep.Proven() {
		t.Errorf("report seq %d..%d proven=%v, want 1..%d proven", rep.FirstSeq, rep.LastSeq, rep.Proven(), tr.n)
	}
	if len(c.Segments) < 3 {
		t.Errorf("%d segments, want several (rotation at 2 KiB)", len(c.Segments))
	}
	if !strings.Contains(c.Dir, "evidence/ns1/pod-a/0d1c9a4e-uid/") {
		t.Errorf("chain dir %q does not hold the pod's key prefix", c.Dir)
	}
	// Shipped sealed files are removed, except the newest (the chain resumes from it).
	if left := audit.RotatedFiles(tr.path); len(left) != 1 {
		t.Errorf("%d sealed files left on the volume, want 1", len(left))
	}
}

func TestOpenChainIsReportedWithItsLastShippedSeq(t *testing.T) {
	srv := s3test.Start(t)
	store := bucket(t, srv, "open", false)
	tr := newTrail(t, store, nil)
	tr.events(40)
	if err := tr.sh.ShipSealed(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, rep := fetchOne(t, store, tr.pub())
	line, ok := c.Verdict(rep)
	if ok || !strings.HasPrefix(line, fmt.Sprintf("open, last shipped seq %d", c.LastSeq)) || c.LastSeq == 0 {
		t.Fatalf("verdict %q ok=%v, want open with the last shipped seq", line, ok)
	}
	if !strings.Contains(line, fmt.Sprintf("not shipped: seq %d onward", c.LastSeq+1)) {
		t.Errorf("verdict %q does not name the seq from which nothing was shipped", line)
	}
}

func TestEditingDeletingOrReorderingShippedObjectsIsDetected(t *testing.T) {
	srv := s3test.Start(t)
	store := bucket(t, srv, "attacked", false)
	tr := newTrail(t, store, nil)
	tr.events(60)
	tr.stop()
	versions, err := store.Versions(context.Background(), "evidence/")
	if err != nil {
		t.Fatal(err)
	}
	var segs, cps []string
	var closed string
	for _, v := range versions {
		switch {
		case strings.Contains(v.Key, "/seg-"):
			segs = append(segs, v.Key)
		case strings.Contains(v.Key, "/checkpoints-"):
			cps = append(cps, v.Key)
		case strings.Contains(v.Key, "/closed-"):
			closed = v.Key
		}
	}
	if closed == "" || len(cps) == 0 {
		t.Fatalf("no closing marker or checkpoints shipped: %+v", versions)
	}
	if len(segs) < 3 {
		t.Fatalf("%d segments shipped, want at least 3", len(segs))
	}
	ctx := context.Background()
	get := func(k string) []byte {
		b, err := store.Get(ctx, k, "")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	last := cps[len(cps)-1]
	orig := map[string][]byte{segs[0]: get(segs[0]), segs[1]: get(segs[1]), segs[2]: get(segs[2]), last: get(last), closed: get(closed)}
	orig[segs[len(segs)-1]] = get(segs[len(segs)-1])
	restore := func() {
		for k, b := range orig {
			if err := store.Put(ctx, k, b, ship.Retention{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name   string
		attack func()
		want   string
	}{
		{"edit", func() {
			b := string(get(segs[1]))
			edited := strings.Replace(b, `"decision":"deny"`, `"decision":"allow"`, 1)
			if edited == b {
				t.Fatalf("%s holds no denial to edit", segs[1])
			}
			if err := store.Put(ctx, segs[1], []byte(edited), ship.Retention{}); err != nil {
				t.Fatal(err)
			}
		}, "TAMPERED"},
		{"delete", func() {
			if err := store.Delete(ctx, segs[1], ""); err != nil {
				t.Fatal(err)
			}
		}, "MISSING: seq"},
		{"edit a checkpoint", func() {
			b := string(get(last))
			i := strings.Index(b, `"seq":`)
			edited := b[:i+6] + "9" + b[i+6:] // a checkpoint that claims another seq
			if err := store.Put(ctx, last, []byte(edited), ship.Retention{}); err != nil {
				t.Fatal(err)
			}
		}, "TAMPERED"},
		{"delete the closing marker", func() {
			if err := store.Delete(ctx, closed, ""); err != nil {
				t.Fatal(err)
			}
		}, "open, last shipped seq"},
		{"delete the last segment and the marker", func() {
			for _, k := range []string{segs[len(segs)-1], closed} {
				if err := store.Delete(ctx, k, ""); err != nil {
					t.Fatal(err)
				}
			}
		}, "TAMPERED"}, // the shipped checkpoints signed lines that are gone
		{"reorder", func() { // swap the contents of two segments
			if err := store.Put(ctx, segs[1], orig[segs[2]], ship.Retention{}); err != nil {
				t.Fatal(err)
			}
			if err := store.Put(ctx, segs[2], orig[segs[1]], ship.Retention{}); err != nil {
				t.Fatal(err)
			}
		}, "TAMPERED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			restore()
			if c, rep := fetchOne(t, store, tr.pub()); func() bool { _, ok := c.Verdict(rep); return !ok }() {
				t.Fatalf("not intact before the attack")
			}
			tc.attack()
			c, rep := fetchOne(t, store, tr.pub())
			line, ok := c.Verdict(rep)
			if ok || !strings.HasPrefix(line, tc.want) {
				t.Fatalf("verdict %q, want %s", line, tc.want)
			}
			if tc.name == "delete" && !strings.Contains(line, path.Base(segs[2])) {
				t.Errorf("verdict %q does not name where the missing object belongs (before %s)", line, path.Base(segs[2]))
			}
		})
	}
}

func TestS3DownBacklogShipsWhenBackAndStaysReady(t *testing.T) {
	srv := s3test.Start(t)
	store := bucket(t, srv, "outage", false)
	tr := newTrail(t, store, func(c *ship.Config) { c.Backlog = 1 << 20 })
	tr.events(20)
	srv.Stop()
	tr.events(60) // requests keep being served while S3 is down
	if err := tr.sh.ShipSealed(context.Background()); err == nil {
		t.Fatal("shipping with S3 down succeeded")
	}
	st := tr.sh.Status()
	if !st.Lagging() || st.Failures == 0 || st.LastError == "" {
		t.Errorf("status %+v, want lagging with a failure", st)
	}
	if err := tr.sh.Ready(); err != nil {
		t.Errorf("Ready() = %v while lagging fail-open, want nil", err)
	}
	srv.Restart(t)
	tr.stop()
	c, rep := fetchOne(t, store, tr.pub())
	if line, ok := c.Verdict(rep); !ok || rep.LastSeq != uint64(tr.n) {
		t.Fatalf("verdict %q (last seq %d), want intact and closed at %d: nothing lost", line, rep.LastSeq, tr.n)
	}
}

func TestBacklogBoundFailOpenDropsAndVerifyNamesTheRange(t *testing.T) {
	srv := s3test.Start(t)
	store := bucket(t, srv, "bounded", false)
	tr := newTrail(t, store, func(c *ship.Config) { c.Backlog = 6000 })
	srv.Stop()
	tr.events(80)
	_ = tr.sh.ShipSealed(context.Background())
	st := tr.sh.Status()
	if st.DroppedFiles == 0 || st.BacklogBytes >= 6000+2048 {
		t.Fatalf("status %+v: want dropped files and the backlog near its bound", st)
	}
	if err := tr.sh.Ready(); err != nil {
		t.Errorf("fail-open Ready() = %v, want nil", err)
	}
	srv.Restart(t)
	tr.stop()
	c, rep := fetchOne(t, store, tr.pub())
	line, ok := c.Verdict(rep)
	if ok || !strings.HasPrefix(line, "MISSING: seq 1..") {
		t.Fatalf("verdict %q, want the dropped range named from seq 1", line)
	}
}

func TestBacklogFullFailClosedTurnsNotReady(t *testing.T) {
	srv := s3test.Start(t)
	store := bucket(t, srv, "closed", false)
	tr := newTrail(t, store, func(c *ship.Config) { c.Backlog = 6000; c.FailClosed = true })
	srv.Stop()
	tr.events(80)
	_ = tr.sh.ShipSealed(context.Background())
	if err := tr.sh.Ready(); err == nil || !strings.Contains(err.Error(), "backlog full") {
		t.Fatalf("Ready() = %v, want backlog full", err)
	}
	if st := tr.sh.Status(); st.DroppedFiles != 0 {
		t.Errorf("fail-closed dropped %d files, want none", st.DroppedFiles)
	}
	srv.Restart(t)
	if err := tr.sh.ShipSealed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tr.sh.Ready(); err != nil {
		t.Errorf("Ready() = %v after the backlog shipped, want nil", err)
	}
}

func TestObjectLockComplianceRefusesDeleteAndVerifyReadsPastDeleteMarkers(t *testing.T) {
	srv := s3test.Start(t)
	store := bucket(t, srv, "worm", true)
	tr := newTrail(t, store, func(c *ship.Config) { c.Retention = ship.Retention{Mode: "COMPLIANCE", Period: time.Hour} })
	tr.events(40)
	tr.stop()
	ctx := context.Background()
	versions, err := store.Versions(ctx, "evidence/")
	if err != nil {
		t.Fatal(err)
	}
	var seg ship.Version
	for _, v := range versions {
		if strings.Contains(v.Key, "/seg-") {
			seg = v
			break
		}
	}
	if seg.ID == "" {
		t.Fatalf("no versioned segment in %+v", versions)
	}
	ret, err := store.Client().GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: aws.String("worm"), Key: aws.String(seg.Key), VersionId: aws.String(seg.ID)})
	if err != nil || ret.Retention == nil || ret.Retention.Mode != types.ObjectLockRetentionModeCompliance {
		t.Fatalf("retention of %s: %+v, %v; want COMPLIANCE", seg.Key, ret, err)
	}
	err = store.Delete(ctx, seg.Key, seg.ID)
	if err == nil {
		t.Fatalf("deleting version %s of %s under COMPLIANCE retention succeeded", seg.ID, seg.Key)
	}
	if !strings.Contains(err.Error(), "AccessDenied") {
		t.Errorf("delete of a retained version failed with %v, want AccessDenied (the retention refusing it)", err)
	}
	t.Logf("delete by version id refused: %v", err)
	_, err = store.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("worm"), Key: aws.String(seg.Key), VersionId: aws.String(seg.ID), BypassGovernanceRetention: aws.Bool(true)})
	if err == nil {
		t.Fatalf("deleting a COMPLIANCE version with the governance bypass succeeded")
	}
	// Nor can the retention be shortened, or turned into GOVERNANCE, to delete it later.
	for _, r := range []types.ObjectLockRetention{
		{Mode: types.ObjectLockRetentionModeCompliance, RetainUntilDate: aws.Time(time.Now().Add(time.Minute))},
		{Mode: types.ObjectLockRetentionModeGovernance, RetainUntilDate: aws.Time(time.Now().Add(time.Hour))},
	} {
		_, err = store.Client().PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: aws.String("worm"), Key: aws.String(seg.Key),
			VersionId: aws.String(seg.ID), Retention: &r, BypassGovernanceRetention: aws.Bool(true)})
		if err == nil {
			t.Errorf("weakening the COMPLIANCE retention of %s to %s until %s succeeded", seg.Key, r.Mode, r.RetainUntilDate)
		}
	}
	// A delete without a version id only adds a delete marker; an overwrite only a version.
	if err := store.Delete(ctx, seg.Key, ""); err != nil {
		t.Fatal(err)
	}
	c, rep := fetchOne(t, store, tr.pub())
	if line, ok := c.Verdict(rep); !ok {
		t.Fatalf("verdict %q after a delete marker, want intact: the version is still there", line)
	}
	if len(c.Notes) == 0 || !strings.Contains(c.Notes[0], "delete marker") {
		t.Errorf("notes %q, want the delete marker reported", c.Notes)
	}
	if err := store.Put(ctx, seg.Key, []byte("{}\n"), ship.Retention{}); err != nil {
		t.Fatal(err)
	}
	c, rep = fetchOne(t, store, tr.pub())
	if line, _ := c.Verdict(rep); !strings.Contains(line, "written over the shipped version") {
		t.Errorf("verdict %q after an overwrite, want it named", line)
	}
	if _, err := store.Get(ctx, seg.Key, seg.ID); errors.Is(err, ship.ErrNotFound) || err != nil {
		t.Errorf("the shipped version is gone: %v", err)
	}
}

func TestDirStoreShipsAndVerifies(t *testing.T) {
	store := ship.DirStore{Root: t.TempDir()}
	tr := newTrail(t, store, nil)
	tr.events(30)
	tr.stop()
	c, rep := fetchOne(t, store, tr.pub())
	if line, ok := c.Verdict(rep); !ok {
		t.Fatalf("verdict %q, want intact and closed", line)
	}
	if _, err := os.Stat(filepath.Join(store.Root, c.Dir, ship.ClosedName(c.LastSeq))); err != nil {
		t.Errorf("closing marker: %v", err)
	}
}

// TestPodGoneWhileS3DownNamesTheUnshippedRange: the sidecar ships a head marker while the
// open file holds lines not shipped; S3 then goes down, more events are written, and the
// pod ends without reaching S3. Verify names the range from the seq after the last one
// shipped to the marker's seq as not shipped, and says that the end past it is recorded
// nowhere in the store (it is not: the events after the outage are gone with the volume).
func TestPodGoneWhileS3DownNamesTheUnshippedRange(t *testing.T) {
	srv := s3test.Start(t)
	store := bucket(t, srv, "gone", false)
	tr := newTrail(t, store, func(c *ship.Config) { c.HeadEvery = time.Nanosecond })
	ctx := context.Background()
	tr.events(40)
	if err := tr.sh.ShipSealed(ctx); err != nil {
		t.Fatal(err)
	}
	tr.events(3) // in the open file only
	if err := tr.sh.ShipHead(ctx); err != nil {
		t.Fatal(err)
	}
	headSeq := uint64(tr.n)
	srv.Stop()
	tr.events(30)
	if err := tr.log.Close(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := tr.sh.Finish(short)
	if err == nil {
		t.Fatal("Finish with S3 down succeeded")
	}
	srv.Restart(t)

	c, rep := fetchOne(t, store, tr.pub())
	line, ok := c.Verdict(rep)
	if c.Head == nil || c.Head.Seq != headSeq || c.Head.ShippedSeq != c.LastSeq {
		t.Fatalf("head marker %+v, want seq %d with shipped seq %d", c.Head, headSeq, c.LastSeq)
	}
	want := fmt.Sprintf("open, last shipped seq %d at ", c.LastSeq)
	lost := fmt.Sprintf("not shipped: seq %d..%d (", c.LastSeq+1, headSeq)
	if ok || !strings.HasPrefix(line, want) || !strings.Contains(line, lost) || !strings.Contains(line, "whatever came after") {
		t.Fatalf("verdict %q, want it to start %q and name %q and an unknown end", line, want, lost)
	}
	// The sidecar's last word (its log, not the store) names the whole range it could not ship.
	if want := fmt.Sprintf("seq %d..%d not shipped", c.LastSeq+1, tr.n); !strings.Contains(err.Error(), want) {
		t.Errorf("Finish: %v, want it to name %q", err, want)
	}
	if c.LastSeq >= headSeq {
		t.Fatalf("last shipped seq %d, want below the head %d (the open file was not shipped)", c.LastSeq, headSeq)
	}
}

// TestHeadMarkerRules: no marker while everything written is shipped, none twice for the
// same head, none more often than HeadEvery; a forged marker past a closing marker, or one
// whose content contradicts its name, is tampering.
func TestHeadMarkerRules(t *testing.T) {
	store := ship.DirStore{Root: t.TempDir()}
	ctx := context.Background()
	heads := func() []string {
		t.Helper()
		vs, err := store.Versions(ctx, "evidence/")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vs {
			if strings.Contains(v.Key, "/head-") {
				out = append(out, v.Key)
			}
		}
		return out
	}
	tr := newTrail(t, store, func(c *ship.Config) { c.HeadEvery = time.Hour })
	tr.events(2)
	for range 2 {
		if err := tr.sh.ShipHead(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tr.events(2)
	if err := tr.sh.ShipHead(ctx); err != nil { // within HeadEvery: none
		t.Fatal(err)
	}
	if got := heads(); len(got) != 1 || !strings.HasSuffix(got[0], ship.HeadName(2)) {
		t.Fatalf("head markers %v, want one, of seq 2", got)
	}
	tr.stop()
	c, rep := fetchOne(t, store, tr.pub())
	if line, ok := c.Verdict(rep); !ok {
		t.Fatalf("closed chain with a head marker: %q, want intact", line)
	}
	for name, body := range map[string]string{
		ship.HeadName(c.LastSeq + 5): fmt.Sprintf(`{"chain":"x","seq":%d,"shipped_seq":1}`, c.LastSeq+5),
		ship.HeadName(1):             `{"chain":"x","seq":7,"shipped_seq":1}`,
	} {
		key := c.Dir + name
		if err := store.Put(ctx, key, []byte(body), ship.Retention{}); err != nil {
			t.Fatal(err)
		}
		c2, rep := fetchOne(t, store, tr.pub())
		if line, _ := c2.Verdict(rep); !strings.HasPrefix(line, "TAMPERED") {
			t.Errorf("verdict with a forged %s: %q, want TAMPERED", name, line)
		}
		if err := os.Remove(filepath.Join(store.Root, key)); err != nil {
			t.Fatal(err)
		}
	}
}
