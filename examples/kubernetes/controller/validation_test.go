package controller_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// TestNewFieldsValidation creates objects with each new field on the real
// kube-apiserver: each rule refuses a bad object with its message, and a
// good object of every form is accepted.
func TestNewFieldsValidation(t *testing.T) {
	_, c := startAPIServer(t)
	spec := func(mod func(*v1alpha1.EtcdBackupConfigSpec)) *v1alpha1.EtcdBackupConfigSpec {
		s := &v1alpha1.EtcdBackupConfigSpec{Cluster: "c", Destination: "d", Schedule: "@hourly"}
		mod(s)
		return s
	}
	restoreSpec := func(mod func(*v1alpha1.EtcdRestoreSpec)) *v1alpha1.EtcdRestoreSpec {
		s := &v1alpha1.EtcdRestoreSpec{Cluster: "c",
			Member: &v1alpha1.RestoreMember{Name: "m", DataDir: "m", PeerURLs: []string{"http://127.0.0.1:2380"}}}
		mod(s)
		return s
	}
	now := metav1.NewTime(time.Now())
	for i, tc := range []struct {
		name string
		obj  any // *v1alpha1.EtcdBackupConfigSpec, *v1alpha1.EtcdBackupSpec or *v1alpha1.EtcdRestoreSpec
		want string
	}{
		{"prefixes of a snapshot", spec(func(s *v1alpha1.EtcdBackupConfigSpec) { s.Prefixes = []string{"/a/"} }),
			"prefixes are for keys-json backups only"},
		{"an empty prefix", spec(func(s *v1alpha1.EtcdBackupConfigSpec) { s.Type, s.Prefixes = v1alpha1.TypeKeysJSON, []string{""} }),
			"spec.prefixes[0]"},
		{"a prefix twice", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Type, s.Prefixes = v1alpha1.TypeKeysJSON, []string{"/a/", "/a/"}
		}), "Duplicate value"},
		{"an unknown type", spec(func(s *v1alpha1.EtcdBackupConfigSpec) { s.Type = "keys" }), "Unsupported value"},
		{"continuous keys-json", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Type, s.Continuous = v1alpha1.TypeKeysJSON, &v1alpha1.ContinuousBackup{Window: metav1.Duration{Duration: time.Hour}}
		}), "a keys-json backup cannot be continuous"},
		{"continuous without a schedule", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Schedule, s.Continuous = "", &v1alpha1.ContinuousBackup{Window: metav1.Duration{Duration: time.Hour}}
		}), "continuous backup needs a schedule"},
		{"a window under a minute", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Continuous = &v1alpha1.ContinuousBackup{Window: metav1.Duration{Duration: 30 * time.Second}}
		}), "continuous.window must be at least 1m"},
		{"a zero flush interval", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Continuous = &v1alpha1.ContinuousBackup{Window: metav1.Duration{Duration: time.Hour}, FlushInterval: dur(0)}
		}), "continuous.flushInterval must be positive"},
		{"a drill of keys-json", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Type, s.Drill = v1alpha1.TypeKeysJSON, &v1alpha1.Drill{Interval: metav1.Duration{Duration: time.Hour}}
		}), "drills restore snapshots: a keys-json config has none"},
		{"a drill every 10s", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Drill = &v1alpha1.Drill{Interval: metav1.Duration{Duration: 10 * time.Second}}
		}), "drill.interval must be at least 1m"},
		{"keep and retention", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Keep, s.Retention = 3, &v1alpha1.Retention{Days: 7}
		}), "give keep or retention, not both"},
		{"keepWithin past maxAge", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Retention = &v1alpha1.Retention{KeepWithin: dur(48 * time.Hour), MaxAge: dur(24 * time.Hour)}
		}), "retention.keepWithin is longer than retention.maxAge"},
		{"a negative maxAge", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Retention = &v1alpha1.Retention{MaxAge: dur(-time.Hour)}
		}), "spec.retention.maxAge"},
		{"negative days", spec(func(s *v1alpha1.EtcdBackupConfigSpec) { s.Retention = &v1alpha1.Retention{Days: -1} }),
			"spec.retention.days"},
		{"replication to its own destination", spec(func(s *v1alpha1.EtcdBackupConfigSpec) { s.ReplicateTo = []string{"v", "d"} }),
			"replicateTo names the config's own destination"},
		{"replication of keys-json", spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Type, s.ReplicateTo = v1alpha1.TypeKeysJSON, []string{"v"}
		}), "a keys-json config cannot replicate"},
		{"replication without a schedule", spec(func(s *v1alpha1.EtcdBackupConfigSpec) { s.Schedule, s.ReplicateTo = "", []string{"v"} }),
			"replication needs a schedule"},
		{"a replication target twice", spec(func(s *v1alpha1.EtcdBackupConfigSpec) { s.ReplicateTo = []string{"v", "v"} }),
			"Duplicate value"},
		{"a time zone that is not a name", spec(func(s *v1alpha1.EtcdBackupConfigSpec) { s.TimeZone = "../etc" }),
			"spec.timeZone"},
		{"prefixes of a one-shot snapshot", &v1alpha1.EtcdBackupSpec{Cluster: "c", Logical: v1alpha1.Logical{Prefixes: []string{"/a/"}}},
			"prefixes are for keys-json backups only"},
		{"a revision and a backup ID", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Revision, s.BackupID = 5, "c-x" }),
			"give at most one of backupID, before, revision and time"},
		{"a revision and a time", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Revision, s.Time = 5, &now }),
			"give at most one of backupID, before, revision and time"},
		{"a time and before", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Before, s.Time = &now, &now }),
			"give at most one of backupID, before, revision and time"},
		{"a negative revision", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Revision = -1 }), "spec.revision"},
		{"member and members", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) {
			s.Members = []v1alpha1.PlannedMember{{Name: "a", PeerURLs: []string{"http://127.0.0.1:2380"}}}
		}), "give one of member (the controller restores it into its restore directory), members"},
		{"neither member nor members", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Member = nil }),
			"give one of member (the controller restores it into its restore directory), members"},
		{"a token of a member restore", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.ClusterToken = "t" }),
			"clusterToken and revisionBump are for members"},
		{"a member twice", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) {
			s.Member = nil
			s.Members = []v1alpha1.PlannedMember{{Name: "a", PeerURLs: []string{"http://127.0.0.1:2380"}}, {Name: "a", PeerURLs: []string{"http://127.0.0.1:2381"}}}
		}), "Duplicate value"},
		{"an import and a member", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Import = &v1alpha1.KeysImport{} }),
			"give one of member (the controller restores it into its restore directory), members"},
		{"an import to a revision", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Member, s.Import, s.Revision = nil, &v1alpha1.KeysImport{}, 5 }),
			"import restores a keys-json backup: revision and time are for snapshot restores"},
		{"an import of an unknown mode", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Member, s.Import = nil, &v1alpha1.KeysImport{Mode: "merge"} }),
			"Unsupported value"},
		{"nearestEarlier of a backup", restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.NearestEarlier = true }),
			"nearestEarlier is for a restore to a revision or a time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(t.Context(), object(tc.obj, "bad", i))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want an error with %q", err, tc.want)
			}
		})
	}
	for i, good := range []any{
		spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Continuous = &v1alpha1.ContinuousBackup{Window: metav1.Duration{Duration: 72 * time.Hour}, FlushInterval: dur(500 * time.Millisecond)}
			s.Retention = &v1alpha1.Retention{KeepLast: 3, Hours: 24, Days: 7, Weeks: 4, Months: 12, KeepWithin: dur(time.Hour), MaxAge: dur(400 * 24 * time.Hour)}
			s.TimeZone = "Europe/Berlin"
			s.ReplicateTo = []string{"vault", "archive"}
		}),
		spec(func(s *v1alpha1.EtcdBackupConfigSpec) {
			s.Type, s.Prefixes, s.Keep = v1alpha1.TypeKeysJSON, []string{"/registry/namespaces/", "/registry/secrets/"}, 5
		}),
		&v1alpha1.EtcdBackupSpec{Cluster: "c", Logical: v1alpha1.Logical{Type: v1alpha1.TypeKeysJSON, Prefixes: []string{"/a/"}}},
		restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Revision, s.NearestEarlier = 5, true }),
		restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) { s.Time = &now }),
		restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) {
			s.Member, s.Import = nil, &v1alpha1.KeysImport{Prefixes: []string{"/registry/configmaps/"}, Mode: "overwrite", DryRun: true}
		}),
		restoreSpec(func(s *v1alpha1.EtcdRestoreSpec) {
			s.Member, s.ClusterToken, s.RevisionBump = nil, "t", 1000
			s.Members = []v1alpha1.PlannedMember{{Name: "a", PeerURLs: []string{"http://127.0.0.1:2380"}}, {Name: "b", PeerURLs: []string{"http://127.0.0.1:2381"}}}
		}),
	} {
		if err := c.Create(t.Context(), object(good, "good", i)); err != nil {
			t.Errorf("good object %d refused: %v", i, err)
		}
	}
	bc := &v1alpha1.EtcdBackupConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "typed"}, Spec: *spec(func(*v1alpha1.EtcdBackupConfigSpec) {})}
	if err := c.Create(t.Context(), bc); err != nil {
		t.Fatal(err)
	}
	bc.Spec.Type = v1alpha1.TypeKeysJSON
	if err := c.Update(t.Context(), bc); err == nil || !strings.Contains(err.Error(), "type is immutable") {
		t.Errorf("changing a config's type: %v, want an error with %q", err, "type is immutable")
	}
}

// object wraps a spec in its object, named for the case.
func object(spec any, kind string, i int) client.Object {
	meta := metav1.ObjectMeta{Namespace: "default", Name: kind + "-" + string(rune('a'+i))}
	switch s := spec.(type) {
	case *v1alpha1.EtcdBackupConfigSpec:
		return &v1alpha1.EtcdBackupConfig{ObjectMeta: meta, Spec: *s}
	case *v1alpha1.EtcdBackupSpec:
		return &v1alpha1.EtcdBackup{ObjectMeta: meta, Spec: *s}
	case *v1alpha1.EtcdRestoreSpec:
		return &v1alpha1.EtcdRestore{ObjectMeta: meta, Spec: *s}
	}
	panic("unknown spec")
}
