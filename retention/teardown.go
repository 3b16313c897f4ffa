package retention

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Teardown deletes every backup of one cluster from one destination: what
// a host does when the cluster itself is deleted (a finalizer). It is
// explicit and guarded: the cluster name must be a valid name (so never
// empty and never a pattern), only the cluster's own folder is touched,
// object locks and pins are honoured as in Prune, and legacy and foreign
// objects stay unless All is set. Run it once per destination.
type Teardown struct {
	// Store is the destination. Required.
	Store Store
	// Destination names it in the report.
	Destination string
	// All also deletes legacy and foreign objects in the cluster's folder.
	All bool
	// Pins, when set, protects backups a restore is reading.
	Pins Pins
	// DryRun reports without deleting.
	DryRun bool
}

// Run deletes the cluster's backups. Its report lists every entry with its
// outcome; the error joins the deletions that failed.
func (t *Teardown) Run(ctx context.Context, cluster string) (*Report, error) {
	if t.Store == nil {
		return nil, ErrNoStore
	}
	if strings.TrimSpace(cluster) == "" {
		return nil, fmt.Errorf("teardown: %w: the cluster name is empty", backup.ErrInvalidName)
	}
	if err := backup.ValidateName("cluster", cluster); err != nil {
		return nil, fmt.Errorf("teardown: %w", err)
	}
	if ro, ok := t.Store.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() && !t.DryRun {
		return nil, fmt.Errorf("teardown %s on %s: %w", cluster, t.Destination, storage.ErrReadOnly)
	}
	listing := &recordingCatalog{Catalog: t.Store, mod: map[string]time.Time{}}
	entries, err := backup.ListBackups(ctx, listing, cluster)
	if err != nil {
		return nil, err
	}
	p := &Pruner{Store: t.Store, Destination: t.Destination, Pins: t.Pins, DryRun: t.DryRun}
	now := p.now()
	report := &Report{Cluster: cluster, Destination: t.Destination, DryRun: t.DryRun}
	var errs []error
	for _, e := range entries {
		if e.Cluster != cluster || !strings.HasPrefix(e.Key, backup.ClusterPrefix(cluster)) {
			report.Items = append(report.Items, Item{Entry: e, Outcome: Kept, Reason: "outside the cluster's folder"})
			continue
		}
		if !t.All && (e.Kind == backup.KindLegacy || e.Kind == backup.KindForeign) {
			report.Items = append(report.Items, Item{Entry: e, Outcome: Kept, Reason: "legacy or foreign object: kept unless All is set"})
			continue
		}
		report.Items = append(report.Items, p.execute(ctx, Decision{Entry: e, Action: Delete, Reason: "cluster teardown"}, now))
	}
	if err := p.collectUploads(ctx, cluster, now, latest(listing.mod), report); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, report.skipErrors(ctx)...)
	return report, errors.Join(errs...)
}
