package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	hexenc "encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// PackFile is one file to put in an evidence pack: Src (or, when set, Data) is copied to
// Name (a slash-separated path inside the pack).
type PackFile struct {
	Role string // "policy", "policy-history", "audit", "checkpoints", "closing", "head", "ledger", "public-key"
	Src  string
	Data []byte
	Name string
}

// Manifest describes an evidence pack: what each file is and its SHA-256, and what Verify
// found in the audit files. It is written as manifest.json, and the hashes also as
// manifest.sha256 (the format sha256sum -c reads).
type Manifest struct {
	Sandbox string         `json:"sandbox"`
	Created time.Time      `json:"created"`
	Files   []ManifestFile `json:"files"`
	Verify  PackVerify     `json:"verify"`
}

// ManifestFile is one file of a pack.
type ManifestFile struct {
	Path   string `json:"path"`
	Role   string `json:"role"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// PackVerify is the Verify report of a pack's audit files, as the manifest records it.
type PackVerify struct {
	Intact      bool     `json:"intact"`
	Events      int      `json:"events"`
	FirstSeq    uint64   `json:"first_seq"`
	LastSeq     uint64   `json:"last_seq"`
	Checkpoints int      `json:"checkpoints"`
	SignedSeq   uint64   `json:"signed_seq"`
	KeyGiven    bool     `json:"key_given"`
	Tampered    string   `json:"tampered,omitempty"`
	Unanchored  string   `json:"unanchored,omitempty"`
	Torn        []string `json:"torn,omitempty"`
}

// WritePack copies files into the new directory dir (which must not exist, or be empty),
// verifies the audit files it holds (against pub when set) and writes the manifest. Files
// whose source is absent are left out. The pack is written even when verification finds
// tampering: the manifest says so.
func WritePack(dir, sandbox string, files []PackFile, pub ed25519.PublicKey, now time.Time) (Manifest, error) {
	return WritePackWith(dir, sandbox, files, VerifyOptions{Key: pub}, now)
}

// WritePackWith is WritePack verifying with opt (several keys, a checkpoint period).
func WritePackWith(dir, sandbox string, files []PackFile, opt VerifyOptions, now time.Time) (Manifest, error) {
	m := Manifest{Sandbox: sandbox, Created: now.UTC()}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return m, fmt.Errorf("create evidence pack: %w", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return m, fmt.Errorf("create evidence pack: %s is not an empty directory", dir)
	}
	var auditFiles []string
	for _, f := range files {
		mf, err := copyHashed(f, filepath.Join(dir, filepath.FromSlash(f.Name)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return m, err
		}
		mf.Path, mf.Role = f.Name, f.Role
		m.Files = append(m.Files, mf)
		if f.Role == "audit" || f.Role == "checkpoints" {
			auditFiles = append(auditFiles, filepath.Join(dir, filepath.FromSlash(f.Name)))
		}
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	if len(auditFiles) > 0 {
		rep, err := VerifyWith(auditFiles, opt)
		if err != nil {
			return m, err
		}
		m.Verify = packVerify(rep, dir)
	}
	return m, writeManifest(dir, m)
}

// packVerify turns a Verify report on the pack's copies into the manifest's form, with
// paths relative to the pack.
func packVerify(rep Report, dir string) PackVerify {
	rel := func(p Problem) string {
		if r, err := filepath.Rel(dir, p.File); err == nil {
			p.File = filepath.ToSlash(r)
		}
		return p.String()
	}
	v := PackVerify{Intact: rep.Intact(), Events: rep.Events, FirstSeq: rep.FirstSeq, LastSeq: rep.LastSeq,
		Checkpoints: rep.Checkpoints, SignedSeq: rep.SignedSeq, KeyGiven: rep.KeyGiven}
	if rep.Tampered != nil {
		v.Tampered = rel(*rep.Tampered)
	}
	if rep.Unanchored != nil {
		v.Unanchored = rel(*rep.Unanchored)
	}
	for _, p := range rep.Torn {
		v.Torn = append(v.Torn, rel(p))
	}
	return v
}

// copyHashed copies f to dst (0600), returning its size and SHA-256.
func copyHashed(f PackFile, dst string) (ManifestFile, error) {
	var in io.Reader = bytes.NewReader(f.Data)
	if f.Data == nil {
		src, err := os.Open(f.Src)
		if err != nil {
			return ManifestFile{}, err
		}
		defer src.Close()
		in = src
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return ManifestFile{}, fmt.Errorf("create evidence pack: %w", err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return ManifestFile{}, fmt.Errorf("create evidence pack: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ManifestFile{}, fmt.Errorf("copy %s into the evidence pack: %w", f.Name, err)
	}
	return ManifestFile{Bytes: n, SHA256: hexenc.EncodeToString(h.Sum(nil))}, nil
}

// writeManifest writes manifest.json and manifest.sha256.
func writeManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	var sums strings.Builder
	for _, f := range m.Files {
		fmt.Fprintf(&sums, "%s  %s\n", f.SHA256, f.Path)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.sha256"), []byte(sums.String()), 0o600); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// AuditFiles lists the files of the audit log at path: its rotated files (oldest first),
// the file itself and its checkpoint file, as PackFiles under audit/.
func AuditFiles(path, checkpoints string) []PackFile {
	var out []PackFile
	for _, p := range append(rotatedFiles(path), path) {
		out = append(out, PackFile{Role: "audit", Src: p, Name: "audit/" + filepath.Base(p)})
	}
	if checkpoints == "" {
		checkpoints = path + ".checkpoints"
	}
	return append(out, PackFile{Role: "checkpoints", Src: checkpoints, Name: "audit/" + filepath.Base(checkpoints)})
}
