//go:build tools

// Package server pins the S3 test server, versitygw (Apache-2.0) with its posix backend, as a
// dependency of this separate module; test/s3test builds its command into .cache/ keyed on
// this module's go.mod and go.sum. airlock itself never links it.
package server

import _ "github.com/versity/versitygw/cmd/versitygw"
