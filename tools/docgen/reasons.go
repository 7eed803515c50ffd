package main

import (
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// reasonTable is the table of every reason code, in the catalogue's order (policy.Reasons).
func reasonTable() string {
	var b strings.Builder
	b.WriteString("| code | from | HTTP status | what happened | remedy |\n|---|---|---|---|---|\n")
	for _, r := range policy.Reasons() {
		status := "—"
		if r.HTTPStatus != 0 {
			status = fmt.Sprint(r.HTTPStatus)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.Code, r.Emitter, status, cell(r.Sentence), cell(r.Remedy))
	}
	return b.String()
}
