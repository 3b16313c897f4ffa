//go:build !unix

package compact

import "os"

// sweepable is false without flock: a stale work directory cannot be told
// from a running compaction's, so none is swept.
const sweepable = false

// tryLock takes no lock.
func tryLock(*os.File) (bool, error) { return true, nil }
