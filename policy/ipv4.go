package policy

import (
	"net/netip"
	"strconv"
	"strings"
)

// parseIPv4 parses an IPv4 address in every spelling inet_aton(3) accepts, which is what the
// WHATWG URL standard's IPv4 parser accepts too: one to four dot-separated parts, each
// decimal, octal (leading "0") or hexadecimal (leading "0x"); the last part fills all the
// bytes the earlier parts leave ("127.1" is 127.0.0.1, "2130706433" is 127.0.0.1). name is
// already lower case without a trailing dot. Curl, browsers and libc resolve these spellings
// to the address, so the SSRF guard must see the address too.
func parseIPv4(name string) (netip.Addr, bool) {
	parts := strings.Split(name, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		nums[i] = n
	}
	var v uint64
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false
		}
		v = v<<8 | n
	}
	lastBits := uint(8 * (5 - len(nums)))
	last := nums[len(nums)-1]
	if last >= 1<<lastBits {
		return netip.Addr{}, false
	}
	v = v<<lastBits | last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Part parses one part of an IPv4 address: "0x1f" (hex; "0x" alone is 0, as in the
// WHATWG parser), "017" (octal), "255" (decimal). Leading zeros never overflow it.
func parseIPv4Part(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case strings.HasPrefix(p, "0x"):
		base, p = 16, p[2:]
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	p = strings.TrimLeft(p, "0")
	if p == "" {
		return 0, true
	}
	if len(p) > 11 { // more than 32 bits in any base we accept
		return 0, false
	}
	n, err := strconv.ParseUint(p, base, 64)
	return n, err == nil
}
