package backup_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/etcdbackup/etcdbackup/backup"
)

// An etcd snapshot stream is the database followed by its sha256. The
// verifier passes every byte on and gives its verdict at the end.
func ExampleVerifyTrailer() {
	db := bytes.Repeat([]byte("bbolt page "), 4096/11+1)[:4096]
	sum := sha256.Sum256(db)
	stream := append(db, sum[:]...)

	tr := backup.VerifyTrailer(bytes.NewReader(stream))
	n, err := io.Copy(io.Discard, tr)
	fmt.Println(n, err, tr.Verified())

	stream[100] ^= 1 // one flipped bit
	_, err = io.Copy(io.Discard, backup.VerifyTrailer(bytes.NewReader(stream)))
	fmt.Println(errors.Is(err, backup.ErrSnapshotIntegrity))

	_, err = io.Copy(io.Discard, backup.VerifyTrailer(bytes.NewReader(stream[:4000])))
	fmt.Println(err)
	// Output:
	// 4128 <nil> true
	// true
	// snapshot integrity: stream has no sha256 trailer (4000 bytes; size%512 is 416, want 32)
}
