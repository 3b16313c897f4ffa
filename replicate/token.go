package replicate

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/etcdbackup/etcdbackup/backup"
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
// The token is derived from the manifest the copy commits, so that the
// next copy of the same backup between the same names resumes a copy that
// was stopped between its data object and its manifest, and two copies
// with one token commit byte-identical manifests (the second commit then
// finds its own bytes and succeeds). A copy under another target name
// derives another token and leaves the first one's objects alone.
func copyToken(want *backup.Manifest) (string, error) {
	body, err := want.Marshal()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte("etcdbackup copy\n"))
	h.Write(body)
	for {
		sum := h.Sum(nil)
		token := hex.EncodeToString(sum[:backup.RunLen/2])
		if token != want.Run {
			return token, nil
		}
		h.Write([]byte{0}) // one chance in 2^32: derive another
	}
}
