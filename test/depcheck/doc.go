// Package depcheck holds no code: its tests enforce the house rules of STYLE.md across the
// module. deps_test.go says which of our packages each package may import (with a reason per
// allowance), in the default build and the kube build, keeps each heavy third-party dependency
// in its one package, keeps package testing out of production code and the Kubernetes client
// out of the default (sidecar) build of cmd/airlock; funclen_test.go holds cmd, internal/sidecar and the
// packages it wires to functions of at most 80 lines.
package depcheck
