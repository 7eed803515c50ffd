package translate

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// jsonEqual fails t unless got and want hold the same JSON value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is invalid JSON %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

// wantField fails t unless err is a *FieldError naming field.
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("got error %v, want a *FieldError naming %q", err, field)
	}
}

// reqCase is one recorded request pair: in, and either the translated body or the field
// refused.
type reqCase struct {
	name, in, want, field string
}

// runRequestCases runs request cases for one direction.
func runRequestCases(t *testing.T, caller, provider Dialect, opts RequestOptions, cases []reqCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Request(caller, provider, []byte(tc.in), opts)
			if tc.field != "" {
				wantField(t, err, tc.field)
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want %s", err, tc.want)
			}
			jsonEqual(t, got, tc.want)
		})
	}
}
