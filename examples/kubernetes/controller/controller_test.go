package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

const waitFor = 60 * time.Second

// startManager runs a manager with the controllers until the test ends.
func startManager(t *testing.T, cfg *rest.Config, opts manager.Options, o controller.Options) (*controller.Controllers, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	opts.Scheme = scheme(t)
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.HealthProbeBindAddress = "0"
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	opts.Cache = controller.CacheOptions(o.Namespace)
	// Two replicas in one process register their controllers' metrics
	// twice on controller-runtime's registry.
	skip := true
	opts.Controller.SkipNameValidation = &skip
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	o.Destinations.CheckInterval = 500 * time.Millisecond
	o.Destinations.PollInterval = 500 * time.Millisecond
	o.Destinations.CheckTimeout = 2 * time.Second
	cs, err := controller.Setup(mgr, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
		cs.Close()
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	return cs, cancel, stopped
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
}

func secret(ns, name, access, secretKey string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{controller.SecretAccessKey: []byte(access), controller.SecretSecretKey: []byte(secretKey)}}
}

func dest(name, u, secretName string) *v1alpha1.BackupDestination {
	d := &v1alpha1.BackupDestination{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.BackupDestinationSpec{URL: u}}
	if secretName != "" {
		d.Spec.CredentialsSecretRef = &v1alpha1.SecretReference{Namespace: "default", Name: secretName}
	}
	return d
}

func cluster(name string, endpoints []string) *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.EtcdClusterSpec{Endpoints: endpoints}}
}

// deleting sets a cluster's deletion policy to Delete, without grace.
func deleting(cl *v1alpha1.EtcdCluster) *v1alpha1.EtcdCluster {
	cl.Spec.DeletionPolicy = v1alpha1.DeletionDelete
	return cl
}

func config(name, clusterName, destName, sched string, keep int32) *v1alpha1.EtcdBackupConfig {
	return &v1alpha1.EtcdBackupConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1alpha1.EtcdBackupConfigSpec{Cluster: clusterName, Destination: destName, Schedule: sched, Keep: keep}}
}

// manifests counts the committed backups of a cluster in a bucket.
func manifests(t *testing.T, s *minioServer, bucket, cluster string) int {
	n := 0
	for _, k := range s.keys(t, bucket, cluster+"/") {
		if strings.HasSuffix(k, ".manifest.json") {
			n++
		}
	}
	return n
}

func condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// events returns the Events about an object, as "reason: note".
func events(t *testing.T, c client.Client, kind, name string) []string {
	var list eventsv1.EventList
	if err := c.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

func hasEvent(evs []string, reason string) bool {
	for _, e := range evs {
		if strings.HasPrefix(e, reason+":") {
			return true
		}
	}
	return false
}

func fillEtcd(t *testing.T, endpoint string, n int) map[string]string {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	kv := map[string]string{}
	for i := range n {
		k, v := fmt.Sprintf("/registry/things/%04d", i), randomHex(t, 32)
		if _, err := cli.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
		kv[k] = v
	}
	return kv
}

// TestSeedController runs the controllers in a manager against a real
// kube-apiserver, MinIO and etcd: scheduled backups land on MinIO with
// status and Events, an unreachable destination is reported without its
// keys, a rotated Secret is used by the next backup, forbidden changes are
// refused with clear messages, deleting a cluster deletes its backups
// only, and a restore object restores a member etcd starts on.
func TestSeedController(t *testing.T) {
	cfg, c := startAPIServer(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := data.Clients[0].Addr().String()
	want := fillEtcd(t, "http://"+endpoint, 100)
	restoreDir := t.TempDir()
	// The library's collectors go to controller-runtime's registry, which
	// the manager serves (labelled by run, so that -count=2 registers anew).
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"test_run": randomHex(t, 4)}, ctrlmetrics.Registry)
	controllers, _, _ := startManager(t, cfg, manager.Options{}, controller.Options{RestoreDir: restoreDir, Registerer: reg})
	ctx := t.Context()

	mainURL := s3.bucket(t, "main")
	offsiteURL := s3.bucket(t, "offsite")
	create(t, c,
		secret("default", "minio", s3.access, s3.secret),
		secret("default", "rotating", s3.access, "not-the-secret-key"),
		dest("default", mainURL, "minio"),
		deleting(cluster("prod-a", []string{"http://" + endpoint})),
		cluster("prod-b", []string{"http://" + endpoint}),
		config("frequent", "prod-a", "default", "@every 1s", 3),
	)

	t.Run("backups appear on MinIO with status and events", func(t *testing.T) {
		eventually(t, "three backups of prod-a on main", func() bool { return manifests(t, s3, "main", "prod-a") >= 3 })
		var bc v1alpha1.EtcdBackupConfig
		eventually(t, "the config's status says so", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "frequent"}, &bc); err != nil {
				t.Fatal(err)
			}
			return bc.Status.LastSuccess != nil && condition(bc.Status.Conditions, v1alpha1.ConditionBackupSucceeded).Status == metav1.ConditionTrue
		})
		if got := condition(bc.Status.Conditions, v1alpha1.ConditionAccepted); got.Status != metav1.ConditionTrue {
			t.Errorf("Accepted = %+v", got)
		}
		if bc.Status.LastBackup == nil || bc.Status.NextBackup == nil {
			t.Errorf("status lacks last or next backup: %+v", bc.Status)
		}
		eventually(t, "events of the config", func() bool {
			evs := events(t, c, "EtcdBackupConfig", "frequent")
			return hasEvent(evs, "BackupStarted") && hasEvent(evs, "BackupUploaded") && hasEvent(evs, "BackupCompleted")
		})
		eventually(t, "the destination's status", func() bool {
			var d v1alpha1.BackupDestination
			if err := c.Get(ctx, types.NamespacedName{Name: "default"}, &d); err != nil {
				t.Fatal(err)
			}
			return condition(d.Status.Conditions, v1alpha1.ConditionAvailable).Status == metav1.ConditionTrue &&
				d.Status.Backups >= 2 && d.Status.LastSync != nil
		})
		eventually(t, "retention keeps three", func() bool { return manifests(t, s3, "main", "prod-a") == 3 })
		mfs, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, mf := range mfs {
			names[mf.GetName()] = true
		}
		for _, n := range []string{"etcdbackup_backup_success_total", "etcdbackup_destination_available", "etcdbackup_schedule_jobs"} {
			if !names[n] {
				t.Errorf("%s is not on controller-runtime's metrics registry", n)
			}
		}
	})

	t.Run("a closed port makes a destination unavailable", func(t *testing.T) {
		closed := fmt.Sprintf("s3://gone?endpoint=%s&insecure=true", freeAddr(t))
		create(t, c, dest("closed", closed, "minio"))
		var d v1alpha1.BackupDestination
		eventually(t, "Available=False", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Name: "closed"}, &d); err != nil {
				t.Fatal(err)
			}
			return condition(d.Status.Conditions, v1alpha1.ConditionAvailable).Status == metav1.ConditionFalse
		})
		got := condition(d.Status.Conditions, v1alpha1.ConditionAvailable)
		if got.Reason != "Unreachable" || got.Message == "" {
			t.Errorf("Available = %+v, want reason Unreachable with a message", got)
		}
		// Events are sent after the status is written, and on their own.
		var evs []string
		eventually(t, "an Unavailable event", func() bool {
			evs = events(t, c, "BackupDestination", "closed")
			return hasEvent(evs, "Unavailable")
		})
		for _, text := range append(evs, got.Message) {
			if strings.Contains(text, s3.secret) || strings.Contains(text, s3.access) {
				t.Errorf("a key leaked: %q", text)
			}
		}
		if err := c.Delete(ctx, &d); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a rotated secret is used by the next backup", func(t *testing.T) {
		// The config comes first: refused until its destination exists.
		create(t, c, config("offsite", "prod-b", "offsite", "@every 1s", 0))
		var bc v1alpha1.EtcdBackupConfig
		eventually(t, "the config refused", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "offsite"}, &bc); err != nil {
				t.Fatal(err)
			}
			return condition(bc.Status.Conditions, v1alpha1.ConditionAccepted).Reason == "DestinationNotFound"
		})
		create(t, c, dest("offsite", offsiteURL, "rotating"))
		eventually(t, "backups with the wrong key fail", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "offsite"}, &bc); err != nil {
				t.Fatal(err)
			}
			return condition(bc.Status.Conditions, v1alpha1.ConditionBackupSucceeded).Status == metav1.ConditionFalse
		})
		if n := manifests(t, s3, "offsite", "prod-b"); n != 0 {
			t.Fatalf("%d backups with a wrong key", n)
		}
		var sec corev1.Secret
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "rotating"}, &sec); err != nil {
			t.Fatal(err)
		}
		sec.Data[controller.SecretSecretKey] = []byte(s3.secret)
		if err := c.Update(ctx, &sec); err != nil {
			t.Fatal(err)
		}
		eventually(t, "backups with the rotated key", func() bool { return manifests(t, s3, "offsite", "prod-b") >= 2 })
		eventually(t, "the config's status says so", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "offsite"}, &bc); err != nil {
				t.Fatal(err)
			}
			return condition(bc.Status.Conditions, v1alpha1.ConditionBackupSucceeded).Status == metav1.ConditionTrue
		})
	})

	t.Run("forbidden changes are refused", func(t *testing.T) {
		// The controller writes the config's status while it runs: an
		// update may meet a newer resourceVersion, so a conflict is read
		// again, and only the admission answer counts.
		err := retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() error {
			var bc v1alpha1.EtcdBackupConfig
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "frequent"}, &bc); err != nil {
				t.Fatal(err)
			}
			bc.Spec.Destination = "offsite"
			return c.Update(ctx, &bc)
		})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "destination is immutable") {
			t.Errorf("changing a config's destination: %v", err)
		}

		err = c.Delete(ctx, &v1alpha1.BackupDestination{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
		if err == nil || !strings.Contains(err.Error(), "the default backup destination cannot be deleted") {
			t.Errorf("deleting default: %v", err)
		}

		// A rename is an update of the object under another name: the API
		// server refuses it.
		var d v1alpha1.BackupDestination
		if err := c.Get(ctx, types.NamespacedName{Name: "offsite"}, &d); err != nil {
			t.Fatal(err)
		}
		d.Name = "elsewhere"
		d.APIVersion, d.Kind = v1alpha1.GroupVersion.String(), "BackupDestination"
		body, _ := json.Marshal(&d)
		cs := kubernetes.NewForConfigOrDie(cfg)
		err = cs.Discovery().RESTClient().Put().AbsPath("/apis/backup.etcdbackup.io/v1alpha1/backupdestinations/offsite").
			SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
		if err == nil || !strings.Contains(err.Error(), "does not match the name on the URL") {
			t.Errorf("renaming a destination: %v", err)
		}

		create(t, c, dest("copy", mainURL, "minio"))
		var cp v1alpha1.BackupDestination
		eventually(t, "the copy refused", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Name: "copy"}, &cp); err != nil {
				t.Fatal(err)
			}
			return condition(cp.Status.Conditions, v1alpha1.ConditionAccepted).Status == metav1.ConditionFalse
		})
		got := condition(cp.Status.Conditions, v1alpha1.ConditionAccepted)
		if got.Reason != "LocationInUse" || !strings.Contains(got.Message, "destination default") {
			t.Errorf("Accepted = %+v", got)
		}
		eventually(t, "a Refused event on the copy", func() bool {
			return hasEvent(events(t, c, "BackupDestination", "copy"), "Refused")
		})
		if err := c.Delete(ctx, &cp); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a one-shot backup restores a member etcd starts on", func(t *testing.T) {
		create(t, c, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "before-upgrade"},
			Spec: v1alpha1.EtcdBackupSpec{Cluster: "prod-b"}})
		var b v1alpha1.EtcdBackup
		eventually(t, "the backup completes", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "before-upgrade"}, &b); err != nil {
				t.Fatal(err)
			}
			return b.Status.Phase == v1alpha1.PhaseCompleted || b.Status.Phase == v1alpha1.PhaseFailed
		})
		if b.Status.Phase != v1alpha1.PhaseCompleted || !strings.HasPrefix(b.Status.BackupID, "prod-b-default-before-upgrade-") {
			t.Fatalf("backup status %+v", b.Status)
		}
		peer := &url.URL{Scheme: "http", Host: freeAddr(t)}
		create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m1"},
			Spec: v1alpha1.EtcdRestoreSpec{Cluster: "prod-b", Destination: "default", BackupID: b.Status.BackupID,
				Member: &v1alpha1.RestoreMember{Name: "m1", DataDir: "m1", PeerURLs: []string{peer.String()}}}})
		var rs v1alpha1.EtcdRestore
		eventually(t, "the restore completes", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "m1"}, &rs); err != nil {
				t.Fatal(err)
			}
			return rs.Status.Phase == v1alpha1.PhaseCompleted || rs.Status.Phase == v1alpha1.PhaseFailed
		})
		if rs.Status.Phase != v1alpha1.PhaseCompleted || rs.Status.BackupID != b.Status.BackupID || rs.Status.MemberID == "" {
			t.Fatalf("restore status %+v", rs.Status)
		}
		eventually(t, "restore events", func() bool {
			evs := events(t, c, "EtcdRestore", "m1")
			return hasEvent(evs, "RestoreStarted") && hasEvent(evs, "MemberRestored")
		})
		restored := startEtcd(t, "m1", filepath.Join(restoreDir, "m1"), peer)
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + restored.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		resp, err := cli.Get(ctx, "/registry/things/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, kv := range resp.Kvs {
			got[string(kv.Key)] = string(kv.Value)
		}
		if len(got) != len(want) {
			t.Fatalf("restored %d keys, want %d", len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("key %s = %q, want %q", k, got[k], v)
			}
		}
	})

	t.Run("a backup or restore created before its destination waits for it", func(t *testing.T) {
		create(t, c, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "early"},
			Spec: v1alpha1.EtcdBackupSpec{Cluster: "prod-a", Destination: "late"}})
		get := func() v1alpha1.EtcdBackupStatus {
			var b v1alpha1.EtcdBackup
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "early"}, &b); err != nil {
				t.Fatal(err)
			}
			return b.Status
		}
		eventually(t, "the backup waits", func() bool {
			st := get()
			return st.Phase == v1alpha1.PhasePending && strings.Contains(st.Message, "waiting") && strings.Contains(st.Message, "late")
		})
		create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "early"},
			Spec: v1alpha1.EtcdRestoreSpec{Cluster: "prod-a", Destination: "late", BackupID: "prod-a-early",
				Member: &v1alpha1.RestoreMember{Name: "early", DataDir: "early", PeerURLs: []string{"http://" + freeAddr(t)}}}})
		eventually(t, "the restore waits", func() bool {
			var rs v1alpha1.EtcdRestore
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "early"}, &rs); err != nil {
				t.Fatal(err)
			}
			return rs.Status.Phase == v1alpha1.PhasePending && strings.Contains(rs.Status.Message, "waiting") && strings.Contains(rs.Status.Message, "late")
		})
		if err := c.Delete(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "early"}}); err != nil {
			t.Fatal(err)
		}
		create(t, c, dest("late", s3.bucket(t, "late"), "minio"))
		eventually(t, "the backup completes", func() bool {
			st := get()
			return st.Phase == v1alpha1.PhaseCompleted || st.Phase == v1alpha1.PhaseFailed
		})
		if st := get(); st.Phase != v1alpha1.PhaseCompleted || manifests(t, s3, "late", "prod-a") != 1 {
			t.Fatalf("backup status %+v", st)
		}
	})

	t.Run("deleting a cluster deletes its backups only", func(t *testing.T) {
		// An archive holds a backup of prod-a, then becomes read-only: the
		// teardown leaves it there.
		create(t, c, dest("archive", s3.bucket(t, "archive"), "minio"),
			&v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "archived"},
				Spec: v1alpha1.EtcdBackupSpec{Cluster: "prod-a", Destination: "archive"}})
		eventually(t, "the archived backup", func() bool { return manifests(t, s3, "archive", "prod-a") == 1 })
		// The destinations controller writes the status meanwhile: update
		// again on a conflict.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var archive v1alpha1.BackupDestination
			if err := c.Get(ctx, types.NamespacedName{Name: "archive"}, &archive); err != nil {
				return err
			}
			archive.Spec.ReadOnly = true
			return c.Update(ctx, &archive)
		}); err != nil {
			t.Fatal(err)
		}
		cs := controllers
		eventually(t, "the archive read-only", func() bool {
			d, err := cs.Registry.Get("archive")
			return err == nil && d.ReadOnly()
		})

		// A backup of prod-a under an object lock stays until the lock
		// expires.
		locked := dest("locked", s3.newBucket(t, "locked", true), "minio")
		locked.Spec.ObjectLock = &v1alpha1.ObjectLock{Mode: "GOVERNANCE", RetainFor: metav1.Duration{Duration: time.Hour}}
		create(t, c, locked, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "locked"},
			Spec: v1alpha1.EtcdBackupSpec{Cluster: "prod-a", Destination: "locked"}})
		eventually(t, "the locked backup", func() bool { return manifests(t, s3, "locked", "prod-a") == 1 })

		before := manifests(t, s3, "offsite", "prod-b")
		if err := c.Delete(ctx, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-a"}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the cluster is gone", func() bool {
			err := c.Get(ctx, types.NamespacedName{Name: "prod-a"}, &v1alpha1.EtcdCluster{})
			return apierrors.IsNotFound(err)
		})
		if keys := s3.keys(t, "main", "prod-a/"); len(keys) != 0 {
			t.Errorf("prod-a's objects left on main: %q", keys)
		}
		if manifests(t, s3, "offsite", "prod-b") < before || manifests(t, s3, "main", "prod-b") != 1 {
			t.Error("prod-b's backups were touched")
		}
		if manifests(t, s3, "archive", "prod-a") != 1 {
			t.Error("the read-only archive's backup of prod-a was deleted")
		}
		if manifests(t, s3, "locked", "prod-a") != 1 {
			t.Error("the object-locked backup of prod-a was deleted")
		}
		eventually(t, "teardown events for each destination", func() bool {
			evs := events(t, c, "EtcdCluster", "prod-a")
			return hasEvent(evs, "BackupsKept") && slices.ContainsFunc(evs, func(e string) bool {
				return strings.Contains(e, "destination locked: 0 objects of cluster prod-a deleted, 1 kept")
			}) && slices.ContainsFunc(evs, func(e string) bool {
				return strings.Contains(e, "destination default: ") && strings.Contains(e, "of cluster prod-a deleted, 0 kept")
			})
		})
		// The cluster's config left the scheduler: Remove returned, so
		// nothing of its @every 1s job runs any more (no sleep can tell).
		if _, ok := cs.Scheduler.Get("default/frequent"); ok { // the job ID is the config's namespace/name
			t.Error("the deleted cluster's config is still scheduled")
		}
		if keys := s3.keys(t, "main", "prod-a/"); len(keys) != 0 {
			t.Errorf("prod-a backed up after its deletion: %q", keys)
		}
		// The configs controller writes the config's status once it saw
		// the cluster go.
		eventually(t, "the config of the deleted cluster not accepted", func() bool {
			var bc v1alpha1.EtcdBackupConfig
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "frequent"}, &bc); err != nil {
				t.Fatal(err)
			}
			return condition(bc.Status.Conditions, v1alpha1.ConditionAccepted).Status == metav1.ConditionFalse
		})
	})
}
