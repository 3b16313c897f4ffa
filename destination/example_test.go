package destination_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
)

// Example reconciles a registry to the destinations a host configured,
// backs up to the default one, and finds the backup in the inventory.
func Example() {
	ctx := context.Background()
	reg, err := destination.NewRegistry(destination.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()

	// What a controller does on every change of its configuration.
	changes, err := reg.Apply(ctx, destination.Desired{Destinations: []destination.Spec{
		{Name: "default", URL: "mem://primary/seed-eu"},
		{Name: "archive", URL: "mem://archive", ReadOnly: true},
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("added:", changes.Added, "default:", changes.Default)

	def, err := reg.Default()
	if err != nil {
		log.Fatal(err)
	}
	p := backup.Pipeline{
		Snapshotter: exampleSnapshotter{},
		Now:         func() time.Time { return time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC) },
	}
	if _, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "nightly", Scheduled: true,
		Targets: []backup.Target{def.Target()}}); err != nil {
		log.Fatal(err)
	}

	inv, err := reg.Sync(ctx, "default")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range inv.Entries {
		fmt.Println(e.Destination, e.Cluster, e.Kind, e.ID)
	}

	archive, err := reg.Get("archive")
	if err != nil {
		log.Fatal(err)
	}
	err = archive.Put(ctx, "prod-a/x.db", strings.NewReader("x"), nil)
	fmt.Println("write to archive refused:", errors.Is(err, destination.ErrReadOnly))
	// Output:
	// added: [archive default] default: default
	// default prod-a backup prod-a-nightly-20261122T030000.000Z
	// write to archive refused: true
}

// exampleSnapshotter serves a tiny stream shaped like etcd's: a database
// page and its sha256.
type exampleSnapshotter struct{}

func (exampleSnapshotter) Snapshot(context.Context) (*backup.Snapshot, error) {
	db := bytes.Repeat([]byte{1}, 512)
	sum := sha256.Sum256(db)
	return backup.NewSnapshot(io.NopCloser(bytes.NewReader(append(db, sum[:]...))), backup.SnapshotInfo{}, nil), nil
}

// ExampleParseURL shows a destination URL's parts, and the refusal of a
// credential in it.
func ExampleParseURL() {
	loc, err := destination.ParseURL("s3://etcd-backups/seed-eu?endpoint=http://minio.backup.svc:9000&region=us-east-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(loc.Bucket, loc.Prefix, loc.Endpoint, loc.Insecure)
	fmt.Println(loc)

	_, err = destination.ParseURL("s3://etcd-backups?secret_key=hunter2")
	fmt.Println(errors.Is(err, destination.ErrCredentialsInURL), strings.Contains(err.Error(), "hunter2"))
	// Output:
	// etcd-backups seed-eu minio.backup.svc:9000 true
	// s3://etcd-backups/seed-eu?endpoint=minio.backup.svc:9000&insecure=true&region=us-east-1
	// true false
}

// ExampleLegacyConfig_Merge upgrades a seed that still has the deprecated
// single-bucket fields: they become the destination named "default".
func ExampleLegacyConfig_Merge() {
	legacy := destination.LegacyConfig{
		S3Endpoint:   "https://s3.eu-central-1.amazonaws.com",
		S3BucketName: "etcd-backups",
		Credentials:  destination.Credentials{Source: destination.SourceSecret, Secret: "kube-system/s3-credentials"},
	}
	desired, err := legacy.Merge(destination.Desired{Destinations: []destination.Spec{
		{Name: "gcs", URL: "gs://etcd-backups-gcs/seed-eu"},
	}})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range desired.Destinations {
		loc, _ := s.Location()
		fmt.Println(s.Name, loc)
	}
	fmt.Println("default:", desired.Default)
	// Output:
	// gcs gs://etcd-backups-gcs/seed-eu
	// default s3://etcd-backups?endpoint=s3.eu-central-1.amazonaws.com
	// default: default
}

// ExampleRegistry_ValidateBackupConfig checks backup configs against the
// registry: a config may not move to another destination.
func ExampleRegistry_ValidateBackupConfig() {
	ctx := context.Background()
	reg, err := destination.NewRegistry(destination.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	for _, s := range []destination.Spec{{Name: "default", URL: "mem://a"}, {Name: "eu", URL: "mem://b"}} {
		if _, err := reg.Add(ctx, s); err != nil {
			log.Fatal(err)
		}
	}

	old := destination.BackupConfig{Name: "nightly", Cluster: "prod-a", Schedule: "0 3 * * *", Keep: 20}
	filled, err := reg.ValidateBackupConfig(old, nil)
	fmt.Println(filled.Destination, err)

	moved := filled
	moved.Destination = "eu"
	_, err = reg.ValidateBackupConfig(moved, &filled)
	fmt.Println(errors.Is(err, destination.ErrDestinationChanged))
	// Output:
	// default <nil>
	// true
}
