package socket_test

import (
	"context"
	"fmt"
	"net"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/destination/socket"
)

// A backup sent over TCP to a receiver that stores it, verified, on its
// own destination (here in memory; a host gives a destination.Destination).
func Example() {
	dests := backuptest.NewDestinations("offsite")
	defer dests.Close()
	store, _ := dests.Uploader(context.Background(), "offsite")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error)
	go func() { served <- (&socket.Receiver{Uploader: store, Destination: "offsite"}).Serve(ctx, l) }()

	stream, rev, _ := backuptest.KeysSnapshot(map[string]string{"/registry/pods/a": "pod a"})
	p := &backup.Pipeline{Snapshotter: backuptest.NewSnapshotter(stream, rev)}
	_, err = p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "nightly", Targets: []backup.Target{
		{Destination: "socket", Uploader: &socket.Uploader{Addr: l.Addr().String()}},
	}})
	fmt.Println("sent:", err)
	cancel()
	<-served

	stored, err := backuptest.Backups(context.Background(), dests.Bucket("offsite"), "prod-a")
	fmt.Println("stored:", len(stored), err, stored[0].Manifest.Destination)
	// Output:
	// sent: <nil>
	// stored: 1 <nil> offsite
}
