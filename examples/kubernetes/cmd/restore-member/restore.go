package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
	"github.com/etcdbackup/etcdbackup/storage/blob/gcs"
)

// markerName is the file, in a restored data directory, that names the
// restore (its UID) and the member's ID: a step that runs again finds it
// and leaves the directory alone. etcd ignores it (with a warning).
const markerName = "etcdbackup-restore"

// restoreMember restores m's data directory from rs's plan, once: into a
// staging directory next to dataDir, marked, then renamed into place,
// with what dataDir held moved aside. Each step can be interrupted and
// run again. It returns the member's ID in hexadecimal.
func restoreMember(ctx context.Context, rs *v1alpha1.EtcdRestore, m v1alpha1.PlannedMember, dataDir string, log *slog.Logger) (string, error) {
	dataDir = filepath.Clean(dataDir)
	uid := string(rs.UID)
	if id, ok := readMarker(dataDir, uid); ok {
		log.Info("member already restored", "restore", rs.Name, "member", m.Name, "data_dir", dataDir)
		return id, nil
	}
	staged := dataDir + ".restore-" + uid
	id, ok := readMarker(staged, uid)
	if !ok {
		// Unmarked: a step stopped before its end. Only this restore's
		// staging directory is removed.
		if err := os.RemoveAll(staged); err != nil {
			return "", err
		}
		var err error
		if id, err = restoreInto(ctx, rs, m, staged, log); err != nil {
			return "", err
		}
		if err := writeMarker(staged, uid, id); err != nil {
			return "", err
		}
	}
	return id, moveIntoPlace(staged, dataDir, uid)
}

// restoreInto restores the plan's backups into dir for m.
func restoreInto(ctx context.Context, rs *v1alpha1.EtcdRestore, m v1alpha1.PlannedMember, dir string, log *slog.Logger) (string, error) {
	plan := rs.Status.Plan
	reg, err := destination.NewRegistry(destination.Options{CredentialSources: destination.AnySource(),
		Drivers: []blob.Driver{gcs.Driver(), azure.Driver()}, Logger: log})
	if err != nil {
		return "", err
	}
	defer reg.Close()
	d, err := reg.Add(ctx, destination.Spec{Name: plan.Destination, URL: plan.URL})
	if err != nil {
		return "", fmt.Errorf("destination %s: %w", plan.Destination, err)
	}
	backups, err := restore.List(ctx, []restore.Source{{Name: d.Name(), Catalog: d}}, rs.Spec.Cluster)
	if err != nil {
		return "", err
	}
	byID := map[string]restore.Backup{}
	for _, b := range backups {
		byID[b.ID] = b
	}
	full, ok := byID[plan.BackupID]
	if !ok {
		return "", fmt.Errorf("backup %s is not on destination %s", plan.BackupID, plan.Destination)
	}
	member := restore.Member{Name: m.Name, DataDir: dir, PeerURLs: m.PeerURLs, InitialCluster: plan.InitialCluster,
		ClusterToken: plan.ClusterToken, RevisionBump: uint64(max(plan.RevisionBump, 0))}
	restorer := &restore.Restorer{Logger: log, Job: rs.Namespace + "/" + rs.Name}
	if plan.Revision == 0 && plan.Time == nil {
		rm, err := restorer.Restore(ctx, full, member)
		if err != nil {
			return "", err
		}
		return strconv.FormatUint(rm.MemberID, 16), nil
	}
	pp := &restore.PointPlan{Point: restore.Point{Cluster: rs.Spec.Cluster, Revision: plan.Revision}, Full: full}
	if plan.Time != nil {
		pp.Time = plan.Time.Time
	}
	for _, id := range plan.Segments {
		s, ok := byID[id]
		if !ok {
			return "", fmt.Errorf("segment %s is not on destination %s", id, plan.Destination)
		}
		pp.Segments = append(pp.Segments, s)
	}
	res, err := restorer.RestorePoint(ctx, pp, member)
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(res.MemberID, 16), nil
}

// readMarker returns the member ID a data directory's marker records,
// and whether it is there for the restore uid.
func readMarker(dir, uid string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, markerName))
	if err != nil {
		return "", false
	}
	got, id, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	return id, ok && got == uid
}

// writeMarker records the restore and the member's ID in dir, durably.
func writeMarker(dir, uid, id string) error {
	f, err := os.OpenFile(filepath.Join(dir, markerName), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s\n", uid, id)
	return errors.Join(err, f.Sync(), f.Close(), syncDir(dir))
}

// moveIntoPlace renames staged to dataDir, after moving what dataDir
// holds aside: the member's old data is kept, never deleted.
func moveIntoPlace(staged, dataDir, uid string) error {
	entries, err := os.ReadDir(dataDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) == 0:
		if err := os.Remove(dataDir); err != nil {
			return err
		}
	default:
		aside := dataDir + ".replaced-" + uid
		if _, err := os.Stat(aside); err == nil {
			return fmt.Errorf("data directory %s holds data and %s exists: move one of them away", dataDir, aside)
		}
		if err := os.Rename(dataDir, aside); err != nil {
			return fmt.Errorf("move the old data directory aside: %w", err)
		}
	}
	if err := os.Rename(staged, dataDir); err != nil {
		return fmt.Errorf("move the restored data directory into place: %w", err)
	}
	return syncDir(filepath.Dir(dataDir))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
