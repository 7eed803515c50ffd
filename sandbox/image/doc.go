// Package image gets container images ready for local sandboxes (`sandbox create --image`):
// it reads an OCI layout directory, an image tarball or a registry reference (pulled through
// the transport the wiring gives it: the operator's dial path), verifies each layer against
// its digest and unpacks it once into a content-addressed cache under the state directory,
// refusing or containing what a hostile layer could do to the host (unpack_linux.go). It pins
// layers per sandbox and prunes the unpinned ones.
//
// It does not mount anything: package sandbox builds each sandbox's root filesystem (an
// overlay of idmapped views of these layers) from the directories Store.Get returns. It is the
// only importer of go-containerregistry in the airlock binary; cmd/airlock wires it into the
// sandbox manager as its sandbox.ImageSource.
package image
