// Package depcheck holds no code: its tests enforce the house rules of STYLE.md across the
// module. deps_test.go says which of our packages each package may import (with a reason per
// allowance), keeps each heavy third-party dependency in its one package, keeps package testing
// out of production code, the Kubernetes client out of cmd/airlock (the sidecar) and build tags
// out of every package; layers_test.go holds that no package imports one above it in the layout
// and that internal/ holds only what ships; funclen_test.go holds cmd, internal/sidecar and the
// packages it wires to functions of at most 80 lines.
package depcheck
