//go:build !linux

package privtest

import (
	"fmt"
	"runtime"
)

// probeNetns reports that network namespaces are Linux-only.
func probeNetns() error {
	return fmt.Errorf("%w: network namespaces need Linux, this is %s", ErrNotSupported, runtime.GOOS)
}
