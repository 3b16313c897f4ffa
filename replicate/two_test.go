package replicate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// TestTwoReplicatorsOnOneTarget: two copies of the same backups run at
// once onto one MinIO target, as two replication jobs of one target would,
// from one store or from two holding the same backups. Each backup ends
// committed once, its data object the source's, and neither copy fails
// for the other.
func TestTwoReplicatorsOnOneTarget(t *testing.T) {
	ctx := t.Context()
	srv := miniotest.Start(t)
	reg, err := destination.NewRegistry(destination.Options{
		Secrets: destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	dst, err := reg.Add(ctx, destination.Spec{Name: "offsite", Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "minio"},
		URL: fmt.Sprintf("s3://%s?endpoint=%s&insecure=true&region=us-east-1", srv.NewBucket(t, miniotest.BucketOptions{}), srv.Endpoint())})
	if err != nil {
		t.Fatal(err)
	}
	src := memBucket()
	for i := range 3 {
		f := full(t, src, i, int64(10+100*i))
		for r := int64(11 + 100*i); r < int64(30+100*i); r += 2 {
			segment(t, src, f, r, r+1)
		}
	}
	want := listed(t, src)
	// The same backups in two stores (fanned out to both), each dating
	// them by its own clock: the copies record other source times, and
	// derive the same tokens.
	a := completedTimes(t, src)
	b := completedTimes(t, src)
	for id, tm := range b.times {
		b.times[id] = tm.Add(3 * time.Second)
	}
	sources := []backup.Catalog{src, a, b}
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		reps := make([]*Report, 2)
		for i := range 2 {
			wg.Go(func() {
				c := &Copier{Source: sources[(round+i)%3], SourceName: "src", Target: DestinationTarget(dst)}
				reps[i], errs[i] = c.Copy(ctx, "prod", Selection{All: true})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, copy %d: %v", round, i, err)
			}
			for _, ch := range reps[i].Chains {
				if !ch.Whole && round > 0 {
					t.Errorf("round %d, copy %d: chain %s not whole", round, i, ch.Full)
				}
			}
		}
	}
	got := listed(t, dst)
	if len(got) != len(want) {
		t.Fatalf("target lists %d backups, want %d", len(got), len(want))
	}
	for _, e := range got {
		rc, err := dst.Get(ctx, e.Key)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(h.Sum(nil)) != e.Manifest.Stored.SHA256 {
			t.Errorf("%s: data object is not its manifest's", e.ID)
		}
		if e.Kind != backup.KindBackup && e.Kind != backup.KindDelta {
			t.Errorf("%s: kind %s", e.ID, e.Kind)
		}
	}
}
