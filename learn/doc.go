// Package learn owns the security team's loop over an audit trail: Learn turns recorded
// traffic (a report-mode run, or an enforce run's denials) into a candidate policy, and
// Replay decides every recorded request again under a candidate and says what would flip.
//
// It reads events of package audit and writes and decides with package policy; it does no
// I/O of its own beyond what its callers hand it, and it never resolves a name. cmd/airlock
// (policy learn, policy replay) is its only importer. policy and audit import nothing of
// ours, so this package sits above both rather than inside policy.
//
// # What Learn writes
//
// One rule per destination host seen in http and connect events, with the ports seen. A
// host gets L7 rules (methods and path patterns) only when every connection to it was seen
// request by request: plain http:// requests through the proxy, or TLS tunnels the sidecar
// intercepted. A tunnel it did not intercept hides its requests, so such a host's rule allows
// every method and path, and a comment says so. To learn methods and paths of HTTPS traffic,
// record with a report-mode policy that sets spec.report.interceptAll (the sandbox must trust
// the sidecar CA, `airlock ca export`).
//
// Paths become patterns by CollapsePath (collapse.go documents the rule), then by the
// sibling rule: FanOut or more patterns of one method that differ only in one segment
// become one pattern with "*" there.
//
// Never a rule: destinations whose dialled address, or IP literal, is internal (loopback,
// private, link-local/metadata, ...), names that only exist inside a cluster or a cloud
// (metadata.google.internal, *.internal, *.local, *.localhost, *.svc, *.cluster.local),
// requests denied for a reason no rule can lift (a Host/SNI mismatch, a misplaced credential
// placeholder), and requests the parent (Options.Parent) denies. Each is listed in comments
// at the end of the candidate with its count and why.
package learn
