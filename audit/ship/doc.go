// Package ship takes a sidecar's sealed audit files and checkpoints off the pod: it uploads
// every sealed (rotated) file of the hash-chained log, with the checkpoint file as it stood,
// to object storage (S3-compatible, or a filesystem path), verifies each upload by reading
// it back, retries with backoff, and at shutdown ships the sealed tail and a closing marker.
// It also reads a shipped chain back for airlock audit verify and export (Fetch).
//
// It owns the layout of shipped objects (layout.go), the Store seam and its two
// implementations (DirStore, S3Store on aws-sdk-go-v2, the only importer of that SDK), and
// the Shipper. It imports audit (segment ranges, rotated files) and nothing else of ours: the
// wiring (internal/sidecar) hands it the operator's HTTP transport, so every upload dials
// through egress.Operator, and S3 credentials from the credential broker.
package ship
