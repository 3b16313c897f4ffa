package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/restore"
)

// runImport imports a keys-json backup into the cluster's live etcd with
// the library's Importer: the backup is fetched and checked against its
// manifest into a temporary file, then read whole before anything is
// written; only keys under the backup's and the import's prefixes are
// touched. A dry run changes nothing and reports in status what the import
// would change.
func (r *restores) runImport(ctx context.Context, rs *v1alpha1.EtcdRestore) error {
	sources, err := r.sources(rs)
	if err != nil {
		return err
	}
	q := restore.Query{Cluster: rs.Spec.Cluster, ID: rs.Spec.BackupID, Kind: backup.KindKeysJSON}
	if rs.Spec.Before != nil {
		q.Before = rs.Spec.Before.Time
	}
	b, err := restore.Find(ctx, sources, q)
	if err != nil {
		return err
	}
	rs.Status.BackupID, rs.Status.Destination = b.ID, b.Source
	cli, err := r.etcdClient(ctx, rs.Spec.Cluster)
	if err != nil {
		return err
	}
	defer cli.Close()
	dir, err := os.MkdirTemp("", "etcdbackup-import-")
	if err != nil {
		return fmt.Errorf("create import directory: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keys.jsonl")
	restorer := &restore.Restorer{Identities: r.identities, Observer: &restoreEvents{events: r.events, obj: rs},
		Logger: r.log, Now: r.now, Pins: r.pins, Job: rs.Namespace + "/" + rs.Name}
	fetched, err := restorer.Fetch(ctx, b, path)
	if err != nil {
		return err
	}
	spec := rs.Spec.Import
	im := &restore.Importer{Client: cli, Mode: restore.ImportMode(spec.Mode), DryRun: spec.DryRun,
		Mapping: restore.KeyMapping{Prefixes: spec.Prefixes}, ManifestChecked: fetched.ManifestChecked,
		TempDir: dir, Logger: r.log}
	if im.Mode == "" {
		im.Mode = restore.CreateOnly
	}
	res, err := im.ImportFile(ctx, path)
	if res != nil {
		rs.Status.Import = importStatus(res)
	}
	return err
}

// etcdClient returns a client of a cluster's etcd, with the TLS its
// EtcdCluster names.
func (r *restores) etcdClient(ctx context.Context, cluster string) (*clientv3.Client, error) {
	snap, err := r.clusters.snapshotter(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return clientOf(ctx, snap)
}

// clientOf returns a client of the etcd a snapshotter reads
// (backup.EtcdSnapshotter has one), for keys-json backups and imports.
func clientOf(ctx context.Context, snap backup.Snapshotter) (*clientv3.Client, error) {
	src, ok := snap.(interface {
		Client(context.Context) (*clientv3.Client, error)
	})
	if !ok {
		return nil, errors.New("the cluster's snapshotter gives no etcd client")
	}
	return src.Client(ctx)
}

// importStatus is an import's result as status shows it.
func importStatus(res *restore.ImportResult) *v1alpha1.ImportStatus {
	st := &v1alpha1.ImportStatus{Revision: res.Revision, Keys: res.Keys, Created: res.Created, Overwritten: res.Overwritten,
		Unchanged: res.Unchanged, Conflicts: res.Conflicts, Leased: res.Leased, DryRun: res.DryRun}
	for _, c := range res.Changes {
		st.Changes = append(st.Changes, c.Op+" "+strconv.Quote(string(c.Key)))
	}
	return st
}
