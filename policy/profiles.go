package policy

import (
	"embed"
	"slices"
)

// The built-in profiles are ordinary policy files embedded in the binary and loaded through
// the same strict loader as any other file, so they cannot drift from the schema.
//
//go:embed profiles/*.yaml
var profileFS embed.FS

// BuiltinNames lists the built-in profiles in the order they widen.
func BuiltinNames() []string {
	return []string{"offline", "repo-read", "repo-write", "deployment"}
}

// Builtin returns a built-in profile: offline, repo-read, repo-write, deployment. An unknown
// name gives an error wrapping ErrUnknownProfile.
func Builtin(name string) (*Policy, error) {
	data, ok := profileData(name)
	if !ok {
		return nil, &LoadError{File: "builtin:" + name, Message: unknownProfile(name), Err: ErrUnknownProfile}
	}
	l := &loader{} // built-ins read no files
	key := "builtin:" + name
	return l.parse(key, data, []string{key})
}

// profileData returns the YAML of a built-in profile.
func profileData(name string) ([]byte, bool) {
	if !slices.Contains(BuiltinNames(), name) {
		return nil, false
	}
	data, err := profileFS.ReadFile("profiles/" + name + ".yaml")
	return data, err == nil
}
