package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
)

// MaxNameLen bounds a sandbox name, so that derived names (network namespace, cgroup, pin
// directory, audit sandbox label) stay short.
const MaxNameLen = 40

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// ValidateName reports whether name can name a sandbox: lower-case letters, digits and inner
// hyphens, at most MaxNameLen characters (a DNS label, like a pod name).
func ValidateName(name string) error {
	if len(name) > MaxNameLen || !nameRE.MatchString(name) {
		return fmt.Errorf("sandbox name %q: use 1-%d lower-case letters, digits and inner hyphens", name, MaxNameLen)
	}
	return nil
}

// NetnsName is the name of the sandbox's network namespace (/run/netns/NetnsName).
func NetnsName(name string) string { return "airlock-" + name }

// hostVethName is the host end of the sandbox's veth pair. Interface names are at most 15
// bytes, so it is "al" and a hash of the state directory and the sandbox name: two state
// directories may hold sandboxes of the same name.
func hostVethName(storeDir, name string) string {
	sum := sha256.Sum256([]byte(storeDir + "\x00" + name))
	return "al" + hex.EncodeToString(sum[:5])
}

// sandboxVethName is the sandbox end of the veth pair, inside its namespace.
const sandboxVethName = "eth0"
