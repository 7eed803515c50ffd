package sandbox

import (
	"context"
	"time"
)

// Image is a container image unpacked in the layer cache, as a sandbox's root filesystem is
// built from it (create --image).
type Image struct {
	// Ref is what create was given: a layout directory, a tarball or a registry reference.
	Ref string `json:"ref"`
	// Digest is the image's id: the digest of its config.
	Digest string `json:"digest"`
	// Layers are the unpacked layer directories, the lowest first; each is shared read-only
	// by every sandbox of the image, and pinned for this one until it is deleted.
	Layers []string `json:"layers"`
	// Config is what the image says about how to run it.
	Config ImageConfig `json:"config"`
	// Unpacked is how many layers this create unpacked (the others were in the cache).
	Unpacked int `json:"-"`
}

// ImageConfig is the part of an image's config a sandbox honours, as Docker does: the
// command (Entrypoint, then Cmd or the command given), the environment (under airlock's env
// file), the user and the working directory.
type ImageConfig struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	User       string   `json:"user,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
}

// ImageSource gets images ready for sandboxes; the wiring passes sandbox/image's Store.
type ImageSource interface {
	// Get reads ref, verifies and unpacks the layers the cache lacks, and pins them for
	// owner (a sandbox's state file) until Release.
	Get(ctx context.Context, ref, owner string) (*Image, error)
	// Release drops owner's pin; the layers stay cached for the next sandbox of the image. A
	// missing pin is not an error.
	Release(owner string) error
	// Prune removes the layers no sandbox pins (pins whose owner is gone hold none) that no
	// sandbox was created with for unusedFor, and says how many.
	Prune(unusedFor time.Duration) (int, error)
}
