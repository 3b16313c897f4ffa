package restore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// A snapshot an older backup job stored gzip-compressed, without a
// manifest, is found as a legacy entry, drilled, and restored into a new
// data directory.
func Example() {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, drivers.NewURLMux(nil), "mem://", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer bucket.Close()
	old, err := os.Open(filepath.Join("testdata", "three-keys.db.gz"))
	if err != nil {
		log.Fatal(err)
	}
	defer old.Close()
	if err := bucket.Put(ctx, "prod-a/etcd-snapshot-2024-05-01.db.gz", old, nil); err != nil {
		log.Fatal(err)
	}

	sources := []restore.Source{{Name: "legacy-s3", Catalog: bucket}}
	latest, err := restore.Find(ctx, sources, restore.Query{Cluster: "prod-a"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(latest.Kind, latest.ID, "on", latest.Source)

	dir, err := os.MkdirTemp("", "restore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	r := &restore.Restorer{TempDir: dir}

	drill, err := r.Drill(ctx, latest)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("drill passed: %v, revision %d, %d keys\n", drill.Passed(), drill.Status.Revision, drill.Status.TotalKeys)

	member, err := r.Restore(ctx, latest, restore.Member{
		Name:     "etcd-0",
		DataDir:  filepath.Join(dir, "etcd-0.etcd"),
		PeerURLs: []string{"https://etcd-0.etcd:2380"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("restored", member.Name, "into", filepath.Base(member.DataDir))
	// Output:
	// legacy etcd-snapshot-2024-05-01.db.gz on legacy-s3
	// drill passed: true, revision 4, 3 keys
	// restored etcd-0 into etcd-0.etcd
}

// Restoring a three-member cluster from the newest backup made before an
// incident, fetched once.
func ExampleRestorer_RestoreCluster() {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, drivers.NewURLMux(nil), "mem://", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer bucket.Close()
	dir, err := os.MkdirTemp("", "restore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A backup made by the pipeline; here from the test snapshot.
	snap := filepath.Join(dir, "snapshot.db")
	if err := os.WriteFile(snap, gunzip(filepath.Join("testdata", "three-keys.db.gz")), 0o600); err != nil {
		log.Fatal(err)
	}
	p := &backup.Pipeline{Snapshotter: fileSnapshotter{snap}}
	if _, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "nightly", Targets: []backup.Target{
		{Destination: "primary", Uploader: &backup.BucketUploader{Bucket: bucket}},
	}}); err != nil {
		log.Fatal(err)
	}

	incident := time.Now()
	b, err := restore.Find(ctx, []restore.Source{{Name: "primary", Catalog: bucket}}, restore.Query{Cluster: "prod-a", Before: incident})
	if err != nil {
		log.Fatal(err)
	}
	c := restore.Cluster{Token: "prod-a-restored", RevisionBump: 100_000}
	for i := range 3 {
		name := fmt.Sprintf("etcd-%d", i)
		c.Members = append(c.Members, restore.ClusterMember{
			Name:     name,
			DataDir:  filepath.Join(dir, name),
			PeerURLs: []string{fmt.Sprintf("https://%s.etcd:2380", name)},
		})
	}
	members, err := (&restore.Restorer{}).RestoreCluster(ctx, b, c)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range members {
		fmt.Println(m.Name, filepath.Base(m.DataDir))
	}
	// Output:
	// etcd-0 etcd-0
	// etcd-1 etcd-1
	// etcd-2 etcd-2
}
