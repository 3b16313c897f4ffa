package azure_test

import (
	"log"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
)

// A host that writes to this cloud passes its driver to the registry; a
// host that does not links none of its SDK.
func ExampleDriver() {
	registry, err := destination.NewRegistry(destination.Options{Drivers: []blob.Driver{azure.Driver()}})
	if err != nil {
		log.Fatal(err)
	}
	defer registry.Close()
}
