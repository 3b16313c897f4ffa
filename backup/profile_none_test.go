package backup_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// BenchmarkBackupNoneToFile backs up an embedded etcd of
// ETCDBACKUP_PROFILE_MIB MiB (default 256) without compression to a
// file:// destination: the CPU a backup spends besides compressing (the
// etcd client, the trailer check, the stored digest, the copies, the
// file's writes). Profile it with
//
//	go test -run '^$' -bench BackupNoneToFile -benchtime 2x -cpuprofile /tmp/none.pprof ./backup/
//
// The profile holds the embedded etcd's side of the snapshot too.
func BenchmarkBackupNoneToFile(b *testing.B) {
	size := 256
	if s := os.Getenv("ETCDBACKUP_PROFILE_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		size = n
	}
	etcd := etcdtest.Start(b)
	const valueSize = 32 << 10
	if _, err := etcdtest.Fill(b.Context(), etcd.Client(b), etcdtest.FillOptions{Keys: size << 20 / valueSize, ValueSize: valueSize}); err != nil {
		b.Fatal(err)
	}
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	if err != nil {
		b.Fatal(err)
	}
	dest, _ := newFile(b)
	p := &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.None}
	var raw int64
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		res, err := p.Run(b.Context(), backup.Request{Cluster: "profile", Name: fmt.Sprintf("n%d", i),
			Targets: []backup.Target{{Destination: "file", Uploader: &backup.BucketUploader{Bucket: dest}}}})
		if err != nil {
			b.Fatal(err)
		}
		raw = res.Raw.Size
	}
	b.SetBytes(raw)
}
