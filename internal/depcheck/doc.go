// Package depcheck holds no code: its test enforces the dependency rules of STYLE.md between
// airlock's packages and on where each heavy third-party dependency may be imported.
package depcheck
