package blob_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"

	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/storage/blob"
)

func Example() {
	ctx := context.Background()

	// The mux is the caller's: register the schemes to open, or take the
	// one package drivers builds.
	mux := new(gcblob.URLMux)
	mux.RegisterBucket(memblob.Scheme, &memblob.URLOpener{})

	b, err := blob.Open(ctx, mux, "mem://", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	for _, key := range []string{"prod-a/2024-05-02.db", "prod-a/2024-05-01.db", "prod-b/2024-05-01.db"} {
		if err := b.Put(ctx, key, strings.NewReader("snapshot of "+key), nil); err != nil {
			log.Fatal(err)
		}
	}
	for info, err := range b.List(ctx, "prod-a/") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(info.Key, info.Size)
	}

	rc, err := b.Get(ctx, "prod-a/2024-05-01.db")
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(body))
	// Output:
	// prod-a/2024-05-01.db 32
	// prod-a/2024-05-02.db 32
	// snapshot of prod-a/2024-05-01.db
}
