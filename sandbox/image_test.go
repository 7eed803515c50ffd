package sandbox

import (
	"context"
	"slices"
	"testing"
	"time"
)

// fakeImages is an ImageSource that records what the manager asks of it.
type fakeImages struct {
	got, released []string
	prunes        int
}

func (f *fakeImages) Get(_ context.Context, ref, owner string) (*Image, error) {
	f.got = append(f.got, owner)
	return &Image{Ref: ref, Digest: "sha256:c0ffee", Layers: []string{"/cache/l1", "/cache/l2"},
		Config: ImageConfig{WorkingDir: "/srv/app/", User: "1000"}}, nil
}

func (f *fakeImages) Release(owner string) error {
	f.released = append(f.released, owner)
	return nil
}

func (f *fakeImages) Prune(time.Duration) (int, error) {
	f.prunes++
	return 1, nil
}

// TestImagePinnedUntilDelete: create gets the image pinned for the sandbox's state file,
// records it and takes its WorkingDir (no --workdir given); delete releases the pin; reap
// prunes what no sandbox pins; a create with an image and no image source is refused.
func TestImagePinnedUntilDelete(t *testing.T) {
	m, _, _ := newTestManager(t)
	imgs := &fakeImages{}
	m.Images = imgs
	o := testOptions(t, "img")
	o.Image = "/images/busybox"
	st, err := m.Create(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	owner := m.Store.path("img")
	if !slices.Equal(imgs.got, []string{owner}) {
		t.Errorf("Get owners %v, want [%s]", imgs.got, owner)
	}
	if c := st.Container; c.Image == nil || c.Image.Ref != o.Image || c.Workdir != "/srv/app" || !c.WorkdirInImage {
		t.Errorf("container %+v: want the image recorded and its WorkingDir /srv/app as the working directory", c)
	}
	if err := m.Delete(context.Background(), "img"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(imgs.released, []string{owner}) {
		t.Errorf("released %v, want [%s]", imgs.released, owner)
	}
	res, err := m.Reap(context.Background(), time.Hour)
	if err != nil || imgs.prunes != 1 || len(res) != 1 || res[0].Name != "images" {
		t.Errorf("reap: %+v, %v, %d prunes; want one images result", res, err, imgs.prunes)
	}
	m.Images = nil
	o.Name = "noimg"
	if _, err := m.Create(context.Background(), o); err == nil {
		t.Error("create with an image and no image source succeeded")
	}
}
