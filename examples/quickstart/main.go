// Command quickstart shows etcdbackup end to end on one machine, with no
// server to install: it starts an etcd in a temporary directory, writes
// sample data, backs it up three times to a local file destination
// (zstd-compressed, age-encrypted with a key it generates), lists the
// backups, prunes them to the newest two, restores the newest into a new
// data directory, starts etcd on it and checks every key.
//
//	go run ./examples/quickstart
//
// It exits 0 when every key came back with its value.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
)

const (
	cluster = "demo"
	keys    = 2000
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	work, err := os.MkdirTemp("", "etcdbackup-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	say("working in %s", work)

	// 1. An etcd with some data.
	etcd, err := startEtcd(filepath.Join(work, "etcd"), "live", nil)
	if err != nil {
		return err
	}
	defer etcd.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	start := time.Now()
	for i := range keys {
		if _, err := cli.Put(ctx, key(i), value(i)); err != nil {
			return fmt.Errorf("write sample data: %w", err)
		}
	}
	say("etcd started and filled with %d keys in %s", keys, since(start))

	// 2. A registry with one local destination.
	backups := filepath.Join(work, "backups")
	if err := os.Mkdir(backups, 0o700); err != nil {
		return err
	}
	registry, err := destination.NewRegistry(destination.Options{})
	if err != nil {
		return err
	}
	defer registry.Close()
	dest, err := registry.Add(ctx, destination.Spec{Name: "local", URL: "file://" + backups})
	if err != nil {
		return err
	}

	// 3. Three backups, compressed and encrypted.
	identity, err := age.GenerateX25519Identity()
	if err != nil {
		return err
	}
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: cli.Endpoints()})
	if err != nil {
		return err
	}
	pipeline := &backup.Pipeline{
		Snapshotter: snapshotter,
		Compression: backup.Zstd,
		Encryption:  backup.Encryption{Recipients: []string{identity.Recipient().String()}},
	}
	for n := range 3 {
		at := time.Now().UTC().Truncate(time.Second).Add(time.Duration(n-2) * time.Hour) // an hour apart, the last now
		pipeline.Now = func() time.Time { return at }
		start := time.Now()
		res, err := pipeline.Run(ctx, backup.Request{Cluster: cluster, Name: "hourly", Scheduled: true, Targets: []backup.Target{dest.Target()}})
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		say("backup %s: %s snapshot stored as %s (%.0f%%) in %s", res.ID, size(res.Raw.Size), size(res.Stored.Size),
			100*float64(res.Stored.Size)/float64(res.Raw.Size), since(start))
	}

	// 4. What the destination holds.
	entries, err := backup.ListBackups(ctx, dest, cluster)
	if err != nil {
		return err
	}
	say("destination %q holds %d backups of %q:", dest.Name(), len(entries), cluster)
	for _, e := range entries {
		say("  %-8s %-40s %s  %s", e.Kind, e.ID, e.Created.Format(time.RFC3339), size(e.Size))
	}

	// 5. Keep the newest two.
	pruner := &retention.Pruner{Store: dest, Destination: dest.Name(), Policy: retention.KeepLast(2)}
	report, err := pruner.Prune(ctx, cluster)
	if err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	say("pruned to the newest 2: %d deleted, %d kept", report.Count(retention.Deleted), report.Count(retention.Kept))

	// 6. Restore the newest into a new data directory.
	sources := []restore.Source{{Name: dest.Name(), Catalog: dest}}
	latest, err := restore.Find(ctx, sources, restore.Query{Cluster: cluster})
	if err != nil {
		return err
	}
	restorer := &restore.Restorer{Identities: []age.Identity{identity}}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	dataDir := filepath.Join(work, "restored")
	start = time.Now()
	restored, err := restorer.Restore(ctx, latest, restore.Member{Name: "restored", DataDir: dataDir, PeerURLs: []string{peerURL}})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	say("restored %s into %s in %s", latest.Entry.ID, restored.DataDir, since(start))

	// 7. Start etcd on it and compare every key.
	copyEtcd, err := startEtcd(dataDir, "restored", &peerPort)
	if err != nil {
		return err
	}
	defer copyEtcd.Close()
	rcli, err := clientv3.New(clientv3.Config{Endpoints: []string{copyEtcd.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer rcli.Close()
	for i := range keys {
		resp, err := rcli.Get(ctx, key(i))
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != value(i) {
			return fmt.Errorf("key %s did not come back with its value", key(i))
		}
	}
	say("every one of the %d keys was restored with its value", keys)
	return nil
}

// startEtcd starts an etcd member in dir on free loopback ports. With a
// peer port, it uses that port (a restored member keeps its peer URL).
func startEtcd(dir, name string, peerPort *int) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	pp := 0
	if peerPort != nil {
		pp = *peerPort
	} else if pp, err = freePort(); err != nil {
		return nil, err
	}
	curl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	purl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = name + "=" + purl.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("etcd did not become ready in 30s")
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func key(i int) string { return fmt.Sprintf("/registry/configmaps/default/cm-%05d", i) }

// value is a small Kubernetes-like object, different for every key.
func value(i int) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%05d","namespace":"default",`+
		`"uid":"%08x-1b4e-4c1a-9d2e-%012x","resourceVersion":"%d","labels":{"app":"demo","shard":"%d"}},`+
		`"data":{"config.yaml":"replicas: %d\nimage: registry.example/app:v1.%d\n"}}`, i, i*2654435761, i*40503, 1000+i, i%7, i%5+1, i%13)
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
