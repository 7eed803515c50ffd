package ebpf

// Pinning. A sandbox's directory PinRoot/<sandbox>/ holds one pin per map (by its name in
// bpf/airlock.c) and one per link ("link_<program>"). The "meta" map holds the schema hash
// of the other maps: a sidecar whose maps have the same hash adopts the pinned maps (allow
// entries, socket marks and counters survive a restart); one with another hash builds new
// maps and swaps every link to programs using them, each swap atomic (BPF_LINK_UPDATE), so
// the cgroup is never without a deny-by-default program.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// metaMap is the name of the map holding the schema hash. Its own layout never changes.
const metaMap = "meta"

// linkPrefix starts the pin name of a link.
const linkPrefix = "link_"

// schemaHash hashes the layout of every map but meta: type, sizes, limits, flags and the
// BTF layout of key and value. Programs are not part of it: they are replaced on every start.
func schemaHash(spec *ebpf.CollectionSpec) uint64 {
	names := make([]string, 0, len(spec.Maps))
	for name := range spec.Maps {
		if name != metaMap && !isDataSection(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		m := spec.Maps[name]
		fmt.Fprintf(h, "%s|%v|%d|%d|%d|%d|%s|%s\n", name, m.Type, m.KeySize, m.ValueSize,
			m.MaxEntries, m.Flags, layout(m.Key), layout(m.Value))
	}
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// isDataSection reports whether a map holds a section's globals (.bss, .data, .rodata):
// those are created on every load and never pinned.
func isDataSection(name string) bool { return len(name) > 0 && name[0] == '.' }

// layout describes a BTF type's memory layout: struct members with offsets, recursively.
func layout(t btf.Type) string {
	switch v := t.(type) {
	case nil:
		return "-"
	case *btf.Struct:
		s := fmt.Sprintf("struct %s %d{", v.Name, v.Size)
		for _, m := range v.Members {
			s += fmt.Sprintf("%s@%d:%s;", m.Name, m.Offset, layout(m.Type))
		}
		return s + "}"
	case *btf.Typedef:
		return layout(v.Type)
	case *btf.Array:
		return fmt.Sprintf("[%d]%s", v.Nelems, layout(v.Type))
	case *btf.Int:
		return fmt.Sprintf("int%d", v.Size)
	default:
		return fmt.Sprintf("%T", t)
	}
}

// pinnedMaps opens the maps pinned in dir when their schema hash is want. It returns nil
// maps (and no error) when there is nothing to adopt: no pins, or another schema.
func pinnedMaps(dir string, spec *ebpf.CollectionSpec, want uint64) (map[string]*ebpf.Map, error) {
	meta, err := ebpf.LoadPinnedMap(filepath.Join(dir, metaMap), nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open pinned %s map: %w", metaMap, err)
	}
	defer meta.Close()
	var got airlockSchemaInfo
	if err := meta.Lookup(uint32(0), &got); err != nil {
		return nil, fmt.Errorf("read pinned schema: %w", err)
	}
	if got.Schema != want {
		return nil, nil
	}
	out := map[string]*ebpf.Map{}
	for name := range spec.Maps {
		if isDataSection(name) {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			closeMaps(out)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil // a half-finished migration: build anew
			}
			return nil, fmt.Errorf("open pinned map %s: %w", name, err)
		}
		out[name] = m
	}
	return out, nil
}

func closeMaps(ms map[string]*ebpf.Map) {
	for _, m := range ms {
		m.Close()
	}
}

// pinMaps pins every map of objs in dir, replacing older pins of the same name; meta goes
// last, after its schema hash is written, so a crash midway leaves a directory the next
// start migrates again.
func pinMaps(dir string, maps map[string]*ebpf.Map, schema uint64) error {
	names := make([]string, 0, len(maps))
	for name := range maps {
		if name != metaMap && !isDataSection(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if err := maps[metaMap].Put(uint32(0), airlockSchemaInfo{Schema: schema}); err != nil {
		return fmt.Errorf("write schema hash: %w", err)
	}
	for _, name := range append(names, metaMap) {
		if err := replacePin(dir, name, maps[name]); err != nil {
			return err
		}
	}
	return nil
}

// replacePin pins m at dir/name. An existing pin is replaced by rename, so the name is
// never absent.
func replacePin(dir, name string, m *ebpf.Map) error {
	final := filepath.Join(dir, name)
	if m.IsPinned() {
		return nil // adopted from this very pin
	}
	tmp := filepath.Join(dir, "tmp_"+name) // bpffs refuses names with a dot
	_ = os.Remove(tmp)
	if err := m.Pin(tmp); err != nil {
		return fmt.Errorf("pin map %s: %w", name, err)
	}
	if err := unix.Rename(tmp, final); err != nil {
		return fmt.Errorf("pin map %s: rename into place: %w", name, err)
	}
	return nil
}

// ensureBPFFS makes sure dir's parent chain lies on a bpf filesystem, mounting one at
// /sys/fs/bpf when dir is under it and nothing is mounted there yet.
func ensureBPFFS(root string) error {
	if onBPFFS(root) {
		return nil
	}
	const mnt = "/sys/fs/bpf"
	if root != mnt && !isUnder(root, mnt) {
		return fmt.Errorf("pin root %s is not on a bpf filesystem: %w", root, ErrNotSupported)
	}
	if !onBPFFS(mnt) {
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", mnt, err)
		}
		if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs at %s: %v: %w", mnt, err, ErrNotSupported)
		}
	}
	return nil
}

// onBPFFS reports whether path, or its closest existing ancestor, is on a bpf filesystem.
func onBPFFS(path string) bool {
	for p := path; ; p = filepath.Dir(p) {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil {
			return st.Type == unix.BPF_FS_MAGIC
		}
		if p == "/" || p == "." {
			return false
		}
	}
}

func isUnder(path, dir string) bool {
	return strings.HasPrefix(filepath.Clean(path)+"/", filepath.Clean(dir)+"/")
}
