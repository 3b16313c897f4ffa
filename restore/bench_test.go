package restore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"filippo.io/age"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// BenchmarkFetch fetches a zstd+age backup from a file bucket. Bytes
// allocated per operation stay flat as the snapshot grows: memory is
// bounded by the read-ahead and decoder buffers, not by the snapshot.
func BenchmarkFetch(b *testing.B) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	for _, mib := range []int{16, 64} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			stream := fakeSnapshot(mib<<20/512, 1)
			bucket, dir := benchBucket(b)
			p := &backup.Pipeline{Snapshotter: streamSnapshotter{stream}, Encryption: backup.Encryption{Recipients: []string{id.Recipient().String()}}}
			if _, err := p.Run(b.Context(), backup.Request{Cluster: "c", Name: "n", Targets: []backup.Target{
				{Destination: "d", Uploader: &backup.BucketUploader{Bucket: bucket}},
			}}); err != nil {
				b.Fatal(err)
			}
			found, err := restore.Find(b.Context(), []restore.Source{{Name: "file", Catalog: bucket}}, restore.Query{Cluster: "c"})
			if err != nil {
				b.Fatal(err)
			}
			r := &restore.Restorer{Identities: []age.Identity{id}}
			out := filepath.Join(dir, "out")
			if err := os.Mkdir(out, 0o700); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				target := filepath.Join(out, fmt.Sprintf("%d.db", i))
				if _, err := r.Fetch(b.Context(), found, target); err != nil {
					b.Fatal(err)
				}
				_ = os.Remove(target)
			}
		})
	}
}
