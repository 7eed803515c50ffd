package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// claimIDRange reserves a free range of IDRangeSize host uids and gids from base on: the
// first whose claim file it creates in idClaimDir (host-wide, so sandboxes of every state
// directory get distinct ranges), skipping ranges that overlap another claim or an id in the
// host's /etc/passwd or /etc/group. owner (the sandbox's state file) is written into the
// claim, so that Reap can tell a claim whose sandbox is gone.
func claimIDRange(base uint32, owner string) (start uint32, claim string, err error) {
	if err := os.MkdirAll(idClaimDir, 0o700); err != nil {
		return 0, "", fmt.Errorf("create %s: %w", idClaimDir, err)
	}
	unlock, err := lockFile(filepath.Join(idClaimDir, ".lock"))
	if err != nil {
		return 0, "", err
	}
	defer unlock()
	taken, err := claimedStarts()
	if err != nil {
		return 0, "", err
	}
	hostIDs := hostUserIDs()
	for n := uint64(0); n < MaxIDRanges; n++ {
		s := uint64(base) + n*IDRangeSize
		if s+IDRangeSize > 1<<32-1 {
			break
		}
		if overlapsAny(s, taken) || overlapsIDs(s, hostIDs) {
			continue
		}
		p := filepath.Join(idClaimDir, strconv.FormatUint(s, 10))
		if err := os.WriteFile(p, []byte(owner+"\n"), 0o600); err != nil {
			return 0, "", fmt.Errorf("claim uid range %d: %w", s, err)
		}
		return uint32(s), p, nil
	}
	return 0, "", fmt.Errorf("no free range of %d uids from %d on (%d claimed in %s): delete sandboxes or reap", IDRangeSize, base, len(taken), idClaimDir)
}

// releaseIDRange removes a claim file; a missing one is not an error.
func releaseIDRange(claim string) error {
	if claim == "" {
		return nil
	}
	if err := os.Remove(claim); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release uid range: %w", err)
	}
	return nil
}

// strayIDClaims lists the claim files whose owner is a state file under storeDir that no
// longer exists (a create that crashed after claiming).
func strayIDClaims(storeDir string) []string {
	entries, err := os.ReadDir(idClaimDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(idClaimDir, e.Name())
		data, err := os.ReadFile(p)
		if err != nil || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		owner := strings.TrimSpace(string(data))
		if filepath.Dir(owner) != storeDir {
			continue
		}
		if _, err := os.Stat(owner); errors.Is(err, fs.ErrNotExist) {
			out = append(out, p)
		}
	}
	return out
}

func claimedStarts() ([]uint64, error) {
	entries, err := os.ReadDir(idClaimDir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", idClaimDir, err)
	}
	var out []uint64
	for _, e := range entries {
		if s, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

func overlapsAny(s uint64, starts []uint64) bool {
	for _, t := range starts {
		if s < t+IDRangeSize && t < s+IDRangeSize {
			return true
		}
	}
	return false
}

func overlapsIDs(s uint64, ids []uint64) bool {
	for _, id := range ids {
		if id >= s && id < s+IDRangeSize {
			return true
		}
	}
	return false
}

// hostUserIDs are the uids and gids /etc/passwd and /etc/group name.
func hostUserIDs() []uint64 {
	var out []uint64
	for _, file := range []string{"/etc/passwd", "/etc/group"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			for _, i := range []int{2, 3} {
				if i < len(fields) && !(file == "/etc/group" && i == 3) {
					if id, err := strconv.ParseUint(fields[i], 10, 32); err == nil {
						out = append(out, id)
					}
				}
			}
		}
		f.Close()
	}
	return out
}

// lockFile takes an exclusive flock on path and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
