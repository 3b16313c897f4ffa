package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// backupEvents turns the events of one backup into Kubernetes Events on
// the object that asked for it: Started, Uploaded (per destination),
// Completed and Failed. Progress events are left to the metrics.
type backupEvents struct {
	events recorder
	obj    runtime.Object
}

func (b *backupEvents) Observe(e backup.Event) {
	switch e.Kind {
	case backup.Started:
		b.events.Eventf(b.obj, nil, corev1.EventTypeNormal, "BackupStarted", "Backup", "backup %s of cluster %s started", e.ID, e.Cluster)
	case backup.Uploaded:
		b.events.Eventf(b.obj, nil, corev1.EventTypeNormal, "BackupUploaded", "Backup", "backup %s uploaded to %s: %d bytes stored", e.ID, e.Destination, e.StoredBytes)
	case backup.Completed:
		b.events.Eventf(b.obj, nil, corev1.EventTypeNormal, "BackupCompleted", "Backup", "backup %s completed: %d bytes of snapshot in %s", e.ID, e.RawBytes, e.Elapsed.Round(1e6))
	case backup.Failed:
		b.events.Eventf(b.obj, nil, corev1.EventTypeWarning, "BackupFailed", "Backup", "backup %s failed: %v", e.ID, e.Err)
	}
}

// restoreEvents turns the events of a restore into Kubernetes Events.
type restoreEvents struct {
	events recorder
	obj    runtime.Object
}

func (r *restoreEvents) Observe(e restore.Event) {
	switch e.Kind {
	case restore.Started:
		r.events.Eventf(r.obj, nil, corev1.EventTypeNormal, "RestoreStarted", "Restore", "restore of %s from %s started", e.ID, e.Source)
	case restore.Fetched:
		r.events.Eventf(r.obj, nil, corev1.EventTypeNormal, "BackupFetched", "Restore", "backup %s fetched from %s: %d bytes", e.ID, e.Source, e.StoredBytes)
	case restore.Restored:
		r.events.Eventf(r.obj, nil, corev1.EventTypeNormal, "MemberRestored", "Restore", "member %s restored from %s", e.Member, e.ID)
	case restore.Failed:
		r.events.Eventf(r.obj, nil, corev1.EventTypeWarning, "RestoreFailed", "Restore", "restore of %s failed: %v", e.ID, e.Err)
	}
}

// realObject returns the object placeholder names (kind, namespace and
// name) as the cache has it, with its UID: kubectl describe shows the
// Events whose object has the UID of the one described. It returns the
// placeholder when the object cannot be read.
func realObject[T client.Object](ctx context.Context, c client.Reader, placeholder T) T {
	obj := placeholder.DeepCopyObject().(T)
	if err := c.Get(ctx, client.ObjectKeyFromObject(placeholder), obj); err != nil {
		return placeholder
	}
	return obj
}
