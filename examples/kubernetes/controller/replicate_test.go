package controller_test

import (
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
	"github.com/etcdbackup/etcdbackup/replicate"
)

// TestConfigReplicatesToASecondDestination runs a config with replicateTo
// on a real kube-apiserver, MinIO and etcd: copies of its backups appear
// on the second destination (copies by their manifests, kept by the
// config's retention), the config's status shows each destination in step,
// and an EtcdRestore naming the second destination restores a member etcd
// starts on with the source's keys. Removing replicateTo stops the copies.
func TestConfigReplicatesToASecondDestination(t *testing.T) {
	cfg, c := startAPIServer(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := data.Clients[0].Addr().String()
	want := fillEtcd(t, "http://"+endpoint, 50)
	restoreDir := t.TempDir()
	startManager(t, cfg, manager.Options{}, controller.Options{RestoreDir: restoreDir, Registerer: prometheus.NewRegistry()})
	ctx := t.Context()

	bc := config("replicated", "prod", "primary", "@every 1s", 3)
	bc.Spec.ReplicateTo = []string{"vault"}
	create(t, c,
		secret("default", "minio", s3.access, s3.secret),
		dest("primary", s3.bucket(t, "primary"), "minio"),
		dest("vault", s3.bucket(t, "vault"), "minio"),
		cluster("prod", []string{"http://" + endpoint}),
		bc,
	)
	key := types.NamespacedName{Namespace: "default", Name: "replicated"}
	eventually(t, "copies on the vault", func() bool { return manifests(t, s3, "vault", "prod") >= 2 })
	var got v1alpha1.EtcdBackupConfig
	eventually(t, "the status shows the vault in step", func() bool {
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		r := got.Status.Replication
		return r != nil && r.LastSuccess != nil && len(r.Targets) == 1 && r.Targets[0].Destination == "vault" &&
			r.Targets[0].BackupsBehind == 0 && r.Targets[0].LagSeconds == "0" && r.Targets[0].LastCopy != nil
	})
	if m := got.Status.Replication.Message; m != "" {
		t.Errorf("replication message %q", m)
	}
	// Every manifest on the vault is a copy, and the config's keep-3
	// prunes the copies too.
	eventually(t, "the vault keeps three copies", func() bool { return manifests(t, s3, "vault", "prod") == 3 })
	var copyID string
	for _, k := range s3.keys(t, "vault", "prod/") {
		if !strings.HasSuffix(k, ".manifest.json") {
			continue
		}
		obj, err := s3.client.GetObject(ctx, "vault", k, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var m backup.Manifest
		err = json.NewDecoder(obj).Decode(&m)
		obj.Close()
		if err != nil {
			// Pruned meanwhile.
			continue
		}
		if !replicate.IsCopy(&m) || m.Destination != "vault" {
			t.Errorf("%s on the vault is not a copy: run %s, destination %s", m.ID, m.Run, m.Destination)
		}
		copyID = m.ID
	}
	if copyID == "" {
		t.Fatal("no copy on the vault")
	}

	// A restore from the vault alone.
	peer := &url.URL{Scheme: "http", Host: freeAddr(t)}
	create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "from-vault"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "prod", Destination: "vault",
			Member: &v1alpha1.RestoreMember{Name: "v1", DataDir: "v1", PeerURLs: []string{peer.String()}}}})
	var rs v1alpha1.EtcdRestore
	eventually(t, "the restore from the vault ends", func() bool {
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "from-vault"}, &rs); err != nil {
			t.Fatal(err)
		}
		return rs.Status.Phase == v1alpha1.PhaseCompleted || rs.Status.Phase == v1alpha1.PhaseFailed
	})
	if rs.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("restore status %+v", rs.Status)
	}
	restored := startEtcd(t, "v1", filepath.Join(restoreDir, "v1"), peer)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + restored.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "/registry/things/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != len(want) {
		t.Fatalf("restored %d keys, want %d", len(resp.Kvs), len(want))
	}
	for _, kv := range resp.Kvs {
		if want[string(kv.Key)] != string(kv.Value) {
			t.Fatalf("key %s restored as %q", kv.Key, kv.Value)
		}
	}

	// Without replicateTo, the status has no replication any more. The
	// controller writes the status meanwhile: a conflict is read again.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, key, &got); err != nil {
			return err
		}
		got.Spec.ReplicateTo = nil
		return c.Update(ctx, &got)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replication status goes", func() bool {
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		return got.Status.ObservedGeneration == got.Generation && got.Status.Replication == nil
	})
}

// TestReplicateToAMissingDestination: a config whose replicateTo names a
// destination that does not exist yet keeps taking its backups (the
// copies alone wait, and the status says why), and its copies start once
// that destination is created.
func TestReplicateToAMissingDestination(t *testing.T) {
	cfg, c := startAPIServer(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := data.Clients[0].Addr().String()
	fillEtcd(t, "http://"+endpoint, 5)
	startManager(t, cfg, manager.Options{}, controller.Options{Registerer: prometheus.NewRegistry()})
	ctx := t.Context()

	bc := config("replicated", "prod", "primary", "@every 1s", 3)
	bc.Spec.ReplicateTo = []string{"vault"}
	vaultURL := s3.bucket(t, "vault")
	create(t, c,
		secret("default", "minio", s3.access, s3.secret),
		dest("primary", s3.bucket(t, "primary"), "minio"),
		cluster("prod", []string{"http://" + endpoint}),
		bc,
	)
	key := types.NamespacedName{Namespace: "default", Name: "replicated"}
	var got v1alpha1.EtcdBackupConfig
	eventually(t, "backups on the primary, the copies refused in the status", func() bool {
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		r := got.Status.Replication
		return manifests(t, s3, "primary", "prod") >= 2 && r != nil && strings.Contains(r.Message, "vault")
	})
	if cond := condition(got.Status.Conditions, v1alpha1.ConditionAccepted); cond.Status != metav1.ConditionTrue {
		t.Fatalf("config not accepted: %+v", cond)
	}
	create(t, c, dest("vault", vaultURL, "minio"))
	eventually(t, "copies on the vault once it exists", func() bool { return manifests(t, s3, "vault", "prod") >= 1 })
	eventually(t, "the status shows the vault", func() bool {
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		r := got.Status.Replication
		return r != nil && r.Message == "" && len(r.Targets) == 1
	})
}
