package s3_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// Example writes a stream of unknown length to a MinIO bucket and reads it
// back. It needs a server, so it has no checked output.
func Example() {
	bucket, err := s3.New(s3.Options{
		Endpoint:     "127.0.0.1:9000",
		Bucket:       "etcd-backups",
		Insecure:     true,
		BucketLookup: s3.LookupPath,
		// Nil would mean the default chain: environment, ~/.aws/credentials, IAM.
		Credentials: s3.StaticCredentials(os.Getenv("MINIO_ROOT_USER"), os.Getenv("MINIO_ROOT_PASSWORD"), ""),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Backups are written once: a second writer of the same key gets ErrExist.
	snapshot := strings.NewReader("an etcd snapshot, streamed")
	err = bucket.PutIfAbsent(ctx, "seed-eu/cluster-a/2026-11-22T0300Z.db", snapshot, nil)
	switch {
	case errors.Is(err, storage.ErrExist):
		fmt.Println("already backed up")
	case errors.Is(err, storage.ErrPermission):
		log.Fatal("check the credentials: ", err)
	case err != nil:
		log.Fatal(err)
	}

	for info, err := range bucket.List(ctx, "seed-eu/cluster-a/") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(info.Key, info.Size)
	}
}
