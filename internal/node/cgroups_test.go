package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func mkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindCgroups(t *testing.T) {
	const uid = "bbe9a533-8aa8-4137-8ae8-1e510d66a19a"
	const side = "8438e635e459ee3a5c3e44b0749c20d710af59ca77eee952527d9403af41fd10"
	const app = "adbe47ef0122dcdca4599d58c1dff1ab99d37c036296e8910f6e88b83007a339"
	uidU := "bbe9a533_8aa8_4137_8ae8_1e510d66a19a"
	cases := []struct {
		name     string
		dirs     []string
		pod, sc  string
		notFound bool
	}{
		{
			name: "hybrid cgroupfs with a kubelet cgroupRoot (the test cluster)",
			dirs: []string{"airlock-kube-8e4ae467/kubepods/besteffort/pod" + uid + "/" + side, "airlock-kube-8e4ae467/kubepods/besteffort/pod" + uid + "/" + app,
				"airlock-kube-8e4ae467/kubepods/burstable", "system.slice/containerd.service"},
			pod: "airlock-kube-8e4ae467/kubepods/besteffort/pod" + uid,
			sc:  "airlock-kube-8e4ae467/kubepods/besteffort/pod" + uid + "/" + side,
		},
		{
			name: "cgroupfs guaranteed pod (no QoS level)",
			dirs: []string{"kubepods/pod" + uid + "/" + side},
			pod:  "kubepods/pod" + uid, sc: "kubepods/pod" + uid + "/" + side,
		},
		{
			name: "systemd driver, containerd",
			dirs: []string{"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + side + ".scope",
				"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + app + ".scope",
				"system.slice/kubelet.service", "user.slice"},
			pod: "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice",
			sc:  "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + side + ".scope",
		},
		{
			name: "systemd driver, guaranteed, CRI-O",
			dirs: []string{"kubepods.slice/kubepods-pod" + uidU + ".slice/crio-conmon-" + side + ".scope", "kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + side + ".scope"},
			pod:  "kubepods.slice/kubepods-pod" + uidU + ".slice", sc: "kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + side + ".scope",
		},
		{
			name: "container not started yet", notFound: true,
			dirs: []string{"kubepods/besteffort/pod" + uid + "/" + app},
		},
		{
			name: "another pod only", notFound: true,
			dirs: []string{"kubepods/besteffort/pod00000000-0000-0000-0000-000000000000/" + side},
		},
		{
			name: "a container ID as a pod directory's prefix is not a match", notFound: true,
			dirs: []string{"kubepods/pod" + uid + "/x" + side},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mkdirs(t, root, tc.dirs...)
			got, err := FindCgroups(root, uid, side)
			if tc.notFound {
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("got %+v, %v; want a not-found error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Cgroups{Pod: filepath.Join(root, tc.pod), Sidecar: filepath.Join(root, tc.sc)}
			if got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestFindCgroupsRefusesPathTricks(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct{ uid, id string }{{"", "x"}, {"u", ""}, {"../u", "x"}, {"u", "../x"}, {"u", "a/b"}} {
		if _, err := FindCgroups(root, tc.uid, tc.id); err == nil || errors.Is(err, os.ErrNotExist) {
			t.Errorf("FindCgroups(%q, %q): %v, want an invalid-argument error", tc.uid, tc.id, err)
		}
	}
}
