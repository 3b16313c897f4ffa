//go:build !etcdbackup_faultpoints || !unix

package faultpoint

import "io"

// Enabled reports whether the build has fault points.
const Enabled = false

// Hit marks the step name. It does nothing in this build.
func Hit(string) {}

// Reader returns r. With fault points built in, it returns a reader that
// hits name after its first read that returns bytes.
func Reader(_ string, r io.Reader) io.Reader { return r }
