package replicate

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// TestCopyToARefusingTarget: a target that refuses every write (a full
// or read-only store as S3 answers it), then one whose answer to a commit
// is lost after the write landed. The first copy fails, and neither leaves
// anything visible but whole backups and a chain without a hole, and the copy after them ends with exactly the
// source's backups and no stray object.
func TestCopyToARefusingTarget(t *testing.T) {
	ctx := t.Context()
	srv := miniotest.Start(t)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	reg, err := destination.NewRegistry(destination.Options{
		Secrets: destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	dst, err := reg.Add(ctx, destination.Spec{Name: "offsite", Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "minio"},
		URL: fmt.Sprintf("s3://%s?endpoint=%s&insecure=true&region=us-east-1", srv.NewBucket(t, miniotest.BucketOptions{}), proxy.Addr())})
	if err != nil {
		t.Fatal(err)
	}
	src := memBucket()
	f := full(t, src, 0, 10)
	for r := int64(11); r < 30; r += 2 {
		segment(t, src, f, r, r+1)
	}
	want := listed(t, src)
	objects := func() int {
		n := 0
		for _, err := range dst.List(ctx, "prod/") {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		return n
	}
	c := &Copier{Source: src, SourceName: "src", Target: DestinationTarget(dst)}

	proxy.SetRules(faultproxy.Rule{Name: "full", Match: faultproxy.IsWrite, Action: faultproxy.AccessDenied})
	if _, err := c.Copy(ctx, "prod", Selection{All: true}); err == nil {
		t.Fatal("a copy to a target refusing every write succeeded")
	}
	if n := objects(); n != 0 {
		t.Fatalf("the refusing target holds %d objects", n)
	}

	// The answer to the second, third or fourth write (the full's
	// manifest, the first segment's data, its manifest) is lost, on a
	// target emptied of what the copy before committed.
	for _, lost := range []int{2, 3, 4} {
		for o, err := range dst.List(ctx, "prod/") {
			if err != nil {
				t.Fatal(err)
			}
			if err := dst.Delete(ctx, o.Key); err != nil {
				t.Fatal(err)
			}
		}
		writes := 0
		name := fmt.Sprintf("lost %d", lost)
		proxy.SetRules(faultproxy.Rule{Name: name, Action: faultproxy.LoseAnswer, Times: 1, Match: func(r *http.Request) bool {
			if !faultproxy.IsWrite(r) {
				return false
			}
			writes++
			return writes == lost
		}})
		// The store's client may ask again and find the write done, or
		// fail that backup: either way the target holds its chain
		// without a hole.
		rep, err := c.Copy(ctx, "prod", Selection{All: true})
		if proxy.Fired()[name] != 1 {
			t.Fatal("no answer was lost")
		}
		through := int64(10)
		for _, e := range listed(t, dst) {
			if e.Kind == "delta" {
				if e.Manifest.FirstRevision != through+1 {
					t.Fatalf("write %d lost: segment %s after a hole at revision %d (%v, %q)", lost, e.ID, through, err, outcomes(rep))
				}
				through = e.Manifest.LastRevision
			}
		}
		t.Logf("write %d lost: %q, %v", lost, outcomes(rep), err)
	}

	proxy.SetRules()
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if err != nil {
		t.Fatalf("rerun: %v (%q)", err, outcomes(rep))
	}
	if got := listed(t, dst); len(got) != len(want) {
		t.Fatalf("target lists %d backups, want %d", len(got), len(want))
	}
	if n := objects(); n != 2*len(want) {
		t.Fatalf("target holds %d objects, want %d (a data object and a manifest per backup)", n, 2*len(want))
	}
}
