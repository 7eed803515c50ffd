//go:build linux

package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/test/imagetest"
	"github.com/airlock-dev/airlock/test/privtest"
)

// TestSandboxImageDebian: two sandboxes of a real Debian root filesystem (mmdebstrap, built
// once and cached in .cache), from its OCI layout and from its OCI archive, the second using
// the layer the first unpacked: `ls -ln /` shows the image's owners (root, 0 0, not the
// overflow id), /var/mail keeps its group (mail, 8), apt's and dpkg's files are where the
// image has them (dpkg reads its database), apt-get runs, and a file written to an rw mount is
// owned by the sandbox's mapped uid on the host.
func TestSandboxImageDebian(t *testing.T) {
	privtest.Require(t, "mmdebstrap")
	e := newSandboxEnv(t)
	layoutDir, archive := imagetest.Debian(t)
	// Both sandboxes at once: the second create finds the layer in the cache.
	for i, ref := range []string{layoutDir, archive} {
		func() { // no subtest: sandbox i lives until the test ends, its pin keeping the layer
			name := e.name("deb")
			out := e.createImage(t, name, ref)
			base := idBaseOf(t, out)
			if want := []string{"1 unpacked now", "0 unpacked now"}[i]; !strings.Contains(out, want) {
				t.Errorf("create %d of the Debian image: no %q in its container line:\n%s", i+1, want, out)
			}
			r := e.exec(t, nil, name, nil, nil, "bash", "-c",
				`ls -ln / | awk 'NR>1 {print "own " $3 ":" $4 " " $9}'; stat -c 'mail %g %A' /var/mail; `+
					`ls -d /usr/bin/apt /usr/bin/apt-get /etc/apt /var/lib/apt /var/lib/dpkg/status /var/cache/apt; `+
					`dpkg-query -W -f='pkg ${Package} ${Status}\n' apt; apt-get --version | head -n1; `+
					`cat /etc/debian_version; id -u; touch /e2e/deb-`+name)
			if r.Code != 0 {
				t.Fatalf("inside the Debian sandbox: %s", r)
			}
			for _, want := range []string{"own 0:0 bin", "own 0:0 etc", "own 0:0 usr", "own 0:0 var", "mail 8 drwxrwsr-x",
				"/var/lib/dpkg/status\n", "/usr/bin/apt\n", "pkg apt install ok installed", "apt ", "12.", "\n0\n"} {
				if !strings.Contains(r.Stdout, want) {
					t.Errorf("inside the Debian sandbox: no %q in\n%s", want, r.Stdout)
				}
			}
			for _, l := range strings.Split(r.Stdout, "\n") {
				// /proc, /sys and the --mount at /e2e are the host's, owned by its root (unmapped inside).
				if strings.HasPrefix(l, "own ") && strings.Contains(l, "65534") && !strings.HasSuffix(l, " proc") && !strings.HasSuffix(l, " sys") && !strings.HasSuffix(l, " e2e") {
					t.Errorf("inside the Debian sandbox: an overflow id (65534) among the image's owners: %s", l)
				}
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(e.out, "deb-"+name), &st); err != nil || int(st.Uid) != base {
				t.Errorf("file written to the rw mount: uid %d (%v), want the sandbox's mapped root %d", st.Uid, err, base)
			}
		}()
	}
}
