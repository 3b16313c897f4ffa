package controller_test

import (
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
	"github.com/etcdbackup/etcdbackup/retention"
)

// etcdKeys reads every key of an etcd, at rev when it is not zero, and the
// revision of the read.
func etcdKeys(t *testing.T, endpoint string, rev int64) (map[string]string, int64) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := cli.Get(t.Context(), "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	for _, e := range resp.Kvs {
		kv[string(e.Key)] = string(e.Value)
	}
	return kv, resp.Header.Revision
}

// writeKeys puts n keys under prefix, deletes del, and returns etcd's
// revision after the last write.
func writeKeys(t *testing.T, endpoint, prefix string, n int, del string) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var rev int64
	for i := range n {
		resp, err := cli.Put(t.Context(), fmt.Sprintf("%s%03d", prefix, i), randomHex(t, 8))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if del != "" {
		resp, err := cli.Delete(t.Context(), del)
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

func get[T client.Object](t *testing.T, c client.Client, name string, obj T) T {
	t.Helper()
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: "default", Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestContinuousConfigAndPointRestore runs a config with continuous
// backup and a GFS retention on the real kube-apiserver, MinIO and etcd:
// the job gets the config's policy and window, segments land on MinIO,
// the status reports the chain and the lag, and EtcdRestores to a
// revision and to a time restore exactly the source's keys at that point.
// A keys-json EtcdBackup stores the keys of its prefix only.
func TestContinuousConfigAndPointRestore(t *testing.T) {
	env, cfg, c := startEnv(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := "http://" + data.Clients[0].Addr().String()
	restoreDir := t.TempDir()
	controllers, _, _ := startManager(t, cfg, manager.Options{}, controller.Options{RestoreDir: restoreDir, Registerer: prometheus.NewRegistry()})
	ctx := t.Context()
	writeKeys(t, endpoint, "/a/before/", 20, "")

	bc := config("follow", "pitr", "default", "@every 1h", 0)
	bc.Spec.Continuous = &v1alpha1.ContinuousBackup{Window: metav1.Duration{Duration: 10 * time.Minute}, FlushInterval: dur(100 * time.Millisecond)}
	bc.Spec.Retention = &v1alpha1.Retention{KeepLast: 2, Days: 7, MaxAge: dur(30 * 24 * time.Hour)}
	create(t, c, secret("default", "minio", s3.access, s3.secret), dest("default", s3.bucket(t, "main"), "minio"),
		cluster("pitr", []string{endpoint}), bc)

	eventually(t, "the job and its chain", func() bool {
		st := get(t, c, "follow", &v1alpha1.EtcdBackupConfig{}).Status
		return st.Continuous != nil && st.Continuous.Following && st.Continuous.ChainStart != ""
	})
	js, ok := controllers.Scheduler.Get("default/follow")
	if !ok {
		t.Fatal("no job")
	}
	wantPolicy := retention.Policy{KeepLast: 2, Days: 7, MaxAge: 30 * 24 * time.Hour}
	if p := js.Job.Retention; p.String() != wantPolicy.String() || p.Location == nil || p.Location.String() != "UTC" {
		t.Errorf("job retention %s (%v), want %s in UTC", p, p.Location, wantPolicy)
	}
	if cont := js.Job.Continuous; cont == nil || cont.Window != 10*time.Minute || cont.FlushInterval != 100*time.Millisecond {
		t.Errorf("job continuous %+v", cont)
	}

	revA := writeKeys(t, endpoint, "/a/one/", 30, "/a/before/003")
	wantA, _ := etcdKeys(t, endpoint, revA)
	revB := writeKeys(t, endpoint, "/a/one/", 10, "/a/before/004") // overwrites, a delete
	var st *v1alpha1.ContinuousStatus
	eventually(t, "the status reports every revision committed", func() bool {
		st = get(t, c, "follow", &v1alpha1.EtcdBackupConfig{}).Status.Continuous
		return st != nil && st.CommittedRevision >= revB
	})
	if st.HeadRevision < st.CommittedRevision || st.LagSeconds == "" || st.LastSegment == nil {
		t.Errorf("continuous status %+v", st)
	}
	d, err := controllers.Registry.Get("default")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := backup.ListBackups(ctx, d, "pitr")
	if err != nil {
		t.Fatal(err)
	}
	segments := 0
	for _, e := range entries {
		if e.Kind == backup.KindDelta {
			segments++
		}
	}
	if segments == 0 {
		t.Fatalf("no segment on MinIO: %d entries", len(entries))
	}

	t.Run("a restore to a revision gives exactly the keys at it", func(t *testing.T) {
		peer := &url.URL{Scheme: "http", Host: freeAddr(t)}
		create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "to-rev"},
			Spec: v1alpha1.EtcdRestoreSpec{Cluster: "pitr", Revision: revA,
				Member: &v1alpha1.RestoreMember{Name: "r1", DataDir: "r1", PeerURLs: []string{peer.String()}}}})
		rs := waitRestore(t, c, "to-rev")
		if rs.Phase != v1alpha1.PhaseCompleted || rs.Revision != revA || rs.BackupID == "" {
			t.Fatalf("restore status %+v, want revision %d", rs, revA)
		}
		restored := startEtcd(t, "r1", filepath.Join(restoreDir, "r1"), peer)
		got, rev := etcdKeys(t, "http://"+restored.Clients[0].Addr().String(), 0)
		if rev != revA {
			t.Errorf("the restored member serves revision %d, want %d", rev, revA)
		}
		if len(got) != len(wantA) {
			t.Fatalf("restored %d keys, want %d", len(got), len(wantA))
		}
		for k, v := range wantA {
			if got[k] != v {
				t.Fatalf("key %s = %q, want %q", k, got[k], v)
			}
		}
	})

	t.Run("a restore to a revision beside each member gives exactly the keys at it", func(t *testing.T) {
		run := stepRunner(t, env, s3)
		volume := t.TempDir()
		peers := []*url.URL{{Scheme: "http", Host: freeAddr(t)}, {Scheme: "http", Host: freeAddr(t)}}
		names := []string{"p0", "p1"}
		var members []v1alpha1.PlannedMember
		for i, n := range names {
			members = append(members, v1alpha1.PlannedMember{Name: n, PeerURLs: []string{peers[i].String()}})
		}
		create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "beside-rev"},
			Spec: v1alpha1.EtcdRestoreSpec{Cluster: "pitr", Revision: revA, Members: members}})
		for _, n := range names {
			if err := run("default/beside-rev", n, filepath.Join(volume, n), getDest(t, c, "default").Spec.URL); err != nil {
				t.Fatalf("restore step of %s: %v", n, err)
			}
		}
		rs := waitRestore(t, c, "beside-rev")
		if rs.Phase != v1alpha1.PhaseCompleted || rs.Plan == nil || rs.Plan.Revision != revA || len(rs.Plan.Segments) == 0 {
			t.Fatalf("restore status %+v, plan %+v", rs, rs.Plan)
		}
		var servers []*embed.Etcd
		for i, n := range names {
			servers = append(servers, startRestoredMember(t, n, filepath.Join(volume, n), peers[i]))
		}
		for _, e := range servers {
			select {
			case <-e.Server.ReadyNotify():
			case <-time.After(30 * time.Second):
				t.Fatal("restored member not ready")
			}
		}
		got, rev := etcdKeys(t, "http://"+servers[1].Clients[0].Addr().String(), 0)
		if rev != revA || len(got) != len(wantA) {
			t.Fatalf("the restored members serve %d keys at revision %d, want %d at %d", len(got), rev, len(wantA), revA)
		}
		for k, v := range wantA {
			if got[k] != v {
				t.Fatalf("key %s = %q, want %q", k, got[k], v)
			}
		}
	})

	t.Run("a restore to a time gives the last revision before it", func(t *testing.T) {
		at := metav1.NewTime(time.Now())
		create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "to-time"},
			Spec: v1alpha1.EtcdRestoreSpec{Cluster: "pitr", Time: &at,
				Member: &v1alpha1.RestoreMember{Name: "r2", DataDir: "r2", PeerURLs: []string{"http://" + freeAddr(t)}}}})
		if rs := waitRestore(t, c, "to-time"); rs.Phase != v1alpha1.PhaseCompleted || rs.Revision < revB || rs.Segments == 0 {
			t.Fatalf("restore status %+v, want revision %d or later", rs, revB)
		}
	})

	t.Run("a keys-json backup stores its prefix only", func(t *testing.T) {
		create(t, c, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "logical"},
			Spec: v1alpha1.EtcdBackupSpec{Cluster: "pitr", Logical: v1alpha1.Logical{Type: v1alpha1.TypeKeysJSON, Prefixes: []string{"/a/one/"}}}})
		st := waitBackup(t, c, "default", "logical")
		if st.Phase != v1alpha1.PhaseCompleted {
			t.Fatalf("backup status %+v", st)
		}
		entries, err := backup.ListBackups(ctx, d, "pitr")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.ID == st.BackupID {
				if e.Kind != backup.KindKeysJSON || e.Manifest.Keys != 30 {
					t.Fatalf("backup %s: kind %s, %d keys; want keys-json of 30 keys", e.ID, e.Kind, e.Manifest.Keys)
				}
				return
			}
		}
		t.Fatalf("backup %s is not on the destination", st.BackupID)
	})

	t.Run("a keys-json import of one prefix: a dry run reports the diff and changes nothing, then it restores", func(t *testing.T) {
		backupID := get(t, c, "logical", &v1alpha1.EtcdBackup{}).Status.BackupID
		if backupID == "" {
			t.Fatal("no keys-json backup")
		}
		saved, _ := etcdKeys(t, endpoint, 0)
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		for _, k := range []string{"/a/one/000", "/a/one/001", "/a/before/000"} {
			if _, err := cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cli.Put(ctx, "/a/one/002", "changed since"); err != nil {
			t.Fatal(err)
		}
		before, _ := etcdKeys(t, endpoint, 0)
		importOf := func(name string, imp v1alpha1.KeysImport) v1alpha1.EtcdRestoreStatus {
			create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				Spec: v1alpha1.EtcdRestoreSpec{Cluster: "pitr", BackupID: backupID, Import: &imp}})
			return waitRestore(t, c, name)
		}
		dry := importOf("import-dry", v1alpha1.KeysImport{Prefixes: []string{"/a/one/"}, Mode: "overwrite", DryRun: true})
		if dry.Phase != v1alpha1.PhaseCompleted || dry.Import == nil || !dry.Import.DryRun ||
			dry.Import.Created != 2 || dry.Import.Overwritten != 1 || len(dry.Import.Changes) != 3 {
			t.Fatalf("dry run status %+v, import %+v", dry, dry.Import)
		}
		if after, _ := etcdKeys(t, endpoint, 0); len(after) != len(before) || after["/a/one/002"] != "changed since" {
			t.Fatalf("the dry run changed etcd: %d keys, /a/one/002 = %q", len(after), after["/a/one/002"])
		}
		done := importOf("import", v1alpha1.KeysImport{Prefixes: []string{"/a/one/"}, Mode: "overwrite"})
		if done.Phase != v1alpha1.PhaseCompleted || done.Import == nil || done.Import.DryRun || done.Import.Created != 2 || done.Import.Overwritten != 1 {
			t.Fatalf("import status %+v, import %+v", done, done.Import)
		}
		after, _ := etcdKeys(t, endpoint, 0)
		for k, v := range saved {
			switch {
			case k == "/a/before/000":
				if _, ok := after[k]; ok {
					t.Errorf("%s, outside the prefix, was restored", k)
				}
			case after[k] != v:
				t.Errorf("key %s = %q, want %q", k, after[k], v)
			}
		}
	})
}

// waitRestore waits until a restore ended and returns its status.
func waitRestore(t *testing.T, c client.Client, name string) v1alpha1.EtcdRestoreStatus {
	t.Helper()
	var rs v1alpha1.EtcdRestore
	eventually(t, "restore "+name+" ends", func() bool {
		rs = *get(t, c, name, &v1alpha1.EtcdRestore{})
		return rs.Status.Phase == v1alpha1.PhaseCompleted || rs.Status.Phase == v1alpha1.PhaseFailed
	})
	return rs.Status
}
