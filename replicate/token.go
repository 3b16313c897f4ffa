package replicate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// copyToken returns the run token a copy writes want with (want is the
// source's manifest with the target's name, its Run still the source's).
//
// A copy never writes with the source's token: a backup run fanned out to
// the source and the target writes the same data object with that token on
// both, and a writer removes an uncommitted data object only when it
// carries the writer's token (backup.RemoveOwnData). Were the copy to share
// it, the copy would take the run's in-flight data object for its own, and
// either writer's refused commit would delete the other's committed data.
//
// The token is derived from the manifest the copy commits, without its
// token and without the source's store time it records
// (backup.Manifest.SourceStored), so that the next copy of the same
// backup under the same target name resumes a copy stopped between its
// data object and its manifest, also when it reads the backup from
// another store holding it (a backup fanned out to two stores, the first
// retired meanwhile), and anyone can tell a copy from its manifest
// (IsCopy). Two copies with one token may then commit manifests that
// differ in that time: the second commit is refused and keeps the data
// object the first one's manifest names (backup.BucketUploader.Commit),
// and the copy finds the backup committed. A copy under another target
// name derives another token and leaves the first one's objects alone.
func copyToken(want *backup.Manifest) (string, error) {
	tokens, err := copyTokens(want, false)
	if err != nil {
		return "", err
	}
	for _, t := range tokens {
		if t != want.Run {
			return t, nil
		}
	}
	return "", errors.New("no copy token differs from the source's run token")
}

// copyTokens returns the tokens a copy may write m with: the first, or
// the second when the first is the source's (one chance in 2^32). With
// stored, the tokens hash m's SourceStored too, as the copies of the
// versions that first recorded it did.
func copyTokens(m *backup.Manifest, stored bool) ([]string, error) {
	bare := *m
	bare.Run = ""
	if !stored {
		bare.SourceStored = time.Time{}
	}
	body, err := bare.Marshal()
	if err != nil {
		return nil, err
	}
	var tokens []string
	for i := range 2 {
		h := sha256.New()
		h.Write([]byte("etcdbackup copy\n"))
		h.Write([]byte{byte(i)})
		h.Write(body)
		tokens = append(tokens, hex.EncodeToString(h.Sum(nil)[:backup.RunLen/2]))
	}
	return tokens, nil
}

// ownRun reports whether run is a token a copy of want writes: want's
// (copyToken), or one the versions whose token hashed the source's store
// time derived for want recording stored as that time (copyTokens(m,
// true)), so that a copy resumes, and locks, what such a version's copy
// left on the target as IsCopy counts it.
func ownRun(want *backup.Manifest, stored time.Time, run string) bool {
	if run == want.Run {
		return true
	}
	if run == "" || stored.IsZero() {
		return false
	}
	old := *want
	old.SourceStored = stored
	tokens, err := copyTokens(&old, true)
	return err == nil && slices.Contains(tokens, run)
}

// IsCopy reports whether the backup m describes was committed by a
// Copier: its run token is the one a copy derives from its manifest. A
// backup run's random token passes with one chance in 2^31, the odds at
// which run tokens already prove which run wrote an object. Retention of a
// replication job counts and prunes only copies (see schedule).
func IsCopy(m *backup.Manifest) bool {
	if m == nil || m.Run == "" {
		return false
	}
	tokens, err := copyTokens(m, false)
	if err == nil && slices.Contains(tokens, m.Run) {
		return true
	}
	if m.SourceStored.IsZero() {
		return false
	}
	// A copy of the versions whose token hashed the source's time.
	tokens, err = copyTokens(m, true)
	return err == nil && slices.Contains(tokens, m.Run)
}

// OfName reports whether m is a backup of the backup name name: a full or
// keys backup whose manifest names it, or a delta segment of that config
// (retention.SegmentConfig: the follower's, recorded in the segment, else
// the name of the full backup its chain started from; a synthetic full
// backup continuing the chain has its own manifest's name).
// A replication job scoped to one name (schedule.Replicate.Name) copies
// and prunes only these.
func OfName(m *backup.Manifest, name string) bool {
	switch {
	case m == nil:
		return false
	case m.IsDelta():
		return retention.SegmentConfig(m) == name
	}
	return m.Name == name
}
