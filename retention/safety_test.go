package retention_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// onStores runs f on a MinIO bucket (with object lock when locking) and on
// a local directory.
func onStores(t *testing.T, locking bool, f func(t *testing.T, b storage.Bucket)) {
	t.Helper()
	t.Run("minio", func(t *testing.T) { f(t, newBucket(t, miniotest.Start(t), locking)) })
	t.Run("file", func(t *testing.T) { f(t, fileBucket(t)) })
}

func fileBucket(t *testing.T) storage.Bucket {
	t.Helper()
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "file://"+t.TempDir()+"?metadata=skip", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// fullAt writes a full backup of config name of cluster prod-a, created at
// the given time (by the writer's clock) with the given revision.
func fullAt(t *testing.T, b storage.Bucket, name string, created time.Time, rev int64) *backup.Manifest {
	t.Helper()
	p := &backup.Pipeline{Snapshotter: revSnapshotter{rev}, Now: func() time.Time { return created }}
	res, err := p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: name, Scheduled: true,
		Targets: []backup.Target{{Destination: "store", Uploader: &backup.BucketUploader{Bucket: b}}}})
	require.NoError(t, err)
	return res.Outcomes[0].Manifest
}

// putKeysJSON stores a keys-json backup as a KeysExporter commits one.
func putKeysJSON(t *testing.T, b storage.Bucket, created time.Time, rev int64) *backup.Manifest {
	t.Helper()
	body := []byte(strings.Repeat("k", 64))
	m := &backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindKeysJSON, Cluster: "prod-a",
		Name: "logical", Created: created, Completed: created, Compression: backup.None, Destination: "store", Keys: 3,
		Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: rev, High: rev}},
		Raw:  backup.Digest{Size: 64, SHA256: strings.Repeat("ab", 32)}, Stored: backup.Digest{Size: 64, SHA256: strings.Repeat("ab", 32)}}
	m.ID = backup.BackupID(m.Cluster, m.Name, created, true)
	m.DataKey = backup.DataKey(m.ID, created, backup.None, false)
	u := &backup.BucketUploader{Bucket: b}
	require.NoError(t, u.Upload(t.Context(), m, bytes.NewReader(body)))
	require.NoError(t, u.Commit(t.Context(), m))
	return m
}

func outcomes(r *retention.Report) map[string]retention.Outcome {
	out := map[string]retention.Outcome{}
	for _, it := range r.Items {
		out[it.Entry.ID] = it.Outcome
	}
	return out
}

// TestPruneKeepsDataOfUnreadableManifest: the newest backup's manifest is
// of a format this version does not read (a newer replica wrote it). Its
// data object is not an orphan, even long past the grace period: nothing
// of it is deleted, and the next-newest readable backup is not taken for
// the newest either.
func TestPruneKeepsDataOfUnreadableManifest(t *testing.T) {
	onStores(t, false, func(t *testing.T, b storage.Bucket) {
		real := time.Now()
		var ms []*backup.Manifest
		for i := range 3 {
			ms = append(ms, fullAt(t, b, "hourly", real.Add(-time.Duration(3-i)*time.Hour), int64(10*(i+1))))
		}
		newest := ms[2]
		mkey := "prod-a/" + backup.ManifestKey(newest.DataKey)
		rc, err := b.Get(t.Context(), mkey)
		require.NoError(t, err)
		raw, err := io.ReadAll(rc)
		require.NoError(t, err)
		rc.Close()
		var doc map[string]any
		require.NoError(t, json.Unmarshal(raw, &doc))
		doc["format"] = 99
		raw, err = json.Marshal(doc)
		require.NoError(t, err)
		require.NoError(t, b.Put(t.Context(), mkey, bytes.NewReader(raw), nil))

		// A pruner two days on: past the grace period by its own clock.
		p := &retention.Pruner{Store: b, Destination: "store", Policy: retention.KeepLast(1), Now: func() time.Time { return real.Add(48 * time.Hour) }}
		report, err := p.Prune(t.Context(), "prod-a")
		require.NoError(t, err)
		left := keysUnder(t, b, "prod-a/")
		require.Contains(t, left, "prod-a/"+newest.DataKey, "the data of the unreadable manifest stays")
		require.Contains(t, left, mkey)
		require.Contains(t, left, "prod-a/"+ms[1].DataKey, "the newest readable backup stays")
		require.NotContains(t, left, "prod-a/"+ms[0].DataKey)
		for _, it := range report.Items {
			if it.Entry.Key == "prod-a/"+newest.DataKey {
				require.Equal(t, retention.ReasonClaimed, it.Reason)
			}
		}
	})
}

// TestPruneFutureDatedOnStores: one backup dated a year ahead (a writer
// whose clock was wrong) does not take the keep-last slot: with keep-last
// 1 the backup just taken stays, and the future one is kept and reported.
func TestPruneFutureDatedOnStores(t *testing.T) {
	onStores(t, false, func(t *testing.T, b storage.Bucket) {
		real := time.Now()
		future := fullAt(t, b, "hourly", real.AddDate(1, 0, 0), 5)
		var ms []*backup.Manifest
		for i := range 3 {
			ms = append(ms, fullAt(t, b, "hourly", real.Add(-time.Duration(3-i)*time.Hour), int64(10*(i+1))))
		}
		p := &retention.Pruner{Store: b, Destination: "store", Policy: retention.KeepLast(1), Now: time.Now}
		report, err := p.Prune(t.Context(), "prod-a")
		require.NoError(t, err)
		got := outcomes(report)
		require.Equal(t, retention.Kept, got[future.ID])
		require.Equal(t, retention.Kept, got[ms[2].ID], "the newest correctly dated backup")
		require.Equal(t, retention.Deleted, got[ms[0].ID])
		require.Equal(t, retention.Deleted, got[ms[1].ID])
	})
}

// TestPruneReportsStoreClockBehind: when every backup is dated after the
// store wrote it (the store's clock runs behind the writers'), retention
// keeps them all and says so: the plan's misdated backups and a gauge.
func TestPruneReportsStoreClockBehind(t *testing.T) {
	onStores(t, false, func(t *testing.T, b storage.Bucket) {
		fast := func() time.Time { return time.Now().Add(time.Hour) }
		for i := range 3 {
			fullAt(t, b, "hourly", fast().Add(time.Duration(i)*time.Second), int64(10*(i+1)))
		}
		m := retention.NewMetrics()
		p := &retention.Pruner{Store: b, Destination: "store", Policy: retention.KeepLast(1), Now: fast, Metrics: m}
		report, err := p.Prune(t.Context(), "prod-a")
		require.NoError(t, err)
		require.Zero(t, report.Count(retention.Deleted))
		require.Len(t, report.Plan.Misdated(), 3)
		require.Equal(t, 3.0, metricValue(t, m, retention.MetricMisdated), "the gauge of misdated backups")
	})
}

// TestPrunePointInTimePerConfig: two continuous configs on one cluster,
// each with its own full backups and chains. Pruning one config with a
// 90-minute window deletes only its own segments, from its own window's
// base; the other config's chain is left whole. Pruning runs two hours
// later by the pruner's clock and the store's (its newest object, bNew,
// stored then), so that every full backup is before the window by both.
func TestPrunePointInTimePerConfig(t *testing.T) {
	onStores(t, false, func(t *testing.T, b storage.Bucket) {
		real := time.Now()
		at := func(d time.Duration) time.Time { return real.Add(-d) }
		a1 := fullAt(t, b, "cont-a", at(3*time.Hour), 100)
		a2 := fullAt(t, b, "cont-a", at(time.Hour), 300)
		b1 := fullAt(t, b, "cont-b", at(4*time.Hour), 50)
		b2 := fullAt(t, b, "cont-b", at(2*time.Hour), 250)
		aOld := putSegment(t, b, at(150*time.Minute), 101, 200, a1.ID)
		// Each follower started a new chain from its config's second full
		// backup (restore continues a full backup only with its own
		// chain's segments).
		aNew := putSegment(t, b, at(50*time.Minute), 201, 350, a2.ID)
		bOld := putSegment(t, b, at(210*time.Minute), 51, 240, b1.ID)
		bNew := putSegment(t, b, at(5*time.Minute), 241, 400, b2.ID)

		prune := func(name string) map[string]retention.Outcome {
			other := map[string]string{"cont-a": "cont-b", "cont-b": "cont-a"}[name]
			chains := retention.ChainPolicy{Window: 90 * time.Minute, Others: []string{other}}
			p := &retention.Pruner{Store: storedAt(b, 2*time.Hour, bNew, a1, a2, b1, b2, aOld, aNew, bOld), Destination: "store", Policy: retention.KeepLast(1), Name: name, Chains: &chains,
				Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}
			report, err := p.Prune(t.Context(), "prod-a")
			require.NoError(t, err)
			return outcomes(report)
		}
		got := prune("cont-a")
		require.Equal(t, retention.Kept, got[bOld.ID], "another config's segment is out of scope")
		require.Equal(t, retention.Deleted, got[aOld.ID], "before cont-a's base a2 (revision 300)")
		for _, m := range []*backup.Manifest{a2, aNew, b1, b2, bNew} {
			require.Equal(t, retention.Kept, got[m.ID], m.ID)
		}

		got = prune("cont-b")
		require.Equal(t, retention.Deleted, got[bOld.ID], "before cont-b's base b2 (revision 250)")
		require.Equal(t, retention.Deleted, got[b1.ID], "keep-last 1 of cont-b")
		for _, m := range []*backup.Manifest{a2, aNew, b2, bNew} {
			require.Equal(t, retention.Kept, got[m.ID], m.ID)
		}
	})
}

// TestPruneReportsUnreadableLocks: a role that may not read object lock
// status (no s3:GetObjectRetention) makes every deletion a skip. Prune
// says so with an error and the skipped counter, instead of returning nil
// while the bucket grows.
func TestPruneReportsUnreadableLocks(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: true})
	direct := srv.S3Options(bucket)
	direct.DeleteAllVersions = true
	writer, err := s3.New(direct)
	require.NoError(t, err)
	real := time.Now()
	for i := range 3 {
		fullAt(t, writer, "hourly", real.Add(-time.Duration(3-i)*time.Hour), int64(i+1))
	}

	isGetRetention := func(r *http.Request) bool { return r.Method == http.MethodGet && r.URL.Query().Has("retention") }
	proxy := faultproxy.StartHTTP(t, srv.Endpoint(), faultproxy.Rule{Name: "retention", Match: isGetRetention, Action: faultproxy.AccessDenied})
	opts := direct
	opts.Endpoint = proxy.Addr()
	b, err := s3.New(opts)
	require.NoError(t, err)
	m := retention.NewMetrics()
	p := &retention.Pruner{Store: b, Destination: "locked", Policy: retention.KeepLast(1), Metrics: m, Now: time.Now}
	report, err := p.Prune(t.Context(), "prod-a")
	require.Error(t, err, "skips for an unreadable lock status are an error")
	require.ErrorIs(t, err, retention.ErrSkipped)
	require.Equal(t, 2, report.Count(retention.Skipped))
	require.Positive(t, proxy.Fired()["retention"])
	require.Equal(t, 2.0, metricValue(t, m, retention.MetricPruneSkipped, "reason", retention.SkipLockUnreadable))
	require.Equal(t, 0.0, metricValue(t, m, retention.MetricPruneSkipped, "reason", retention.SkipLocked))
	require.Len(t, keysUnder(t, writer, "prod-a/"), 6, "nothing deleted")
}

// TestPinsHoldForEveryKind: a keys-json backup pinned by a fetch outlives
// a prune of keys-json backups and a teardown of the cluster.
func TestPinsHoldForEveryKind(t *testing.T) {
	onStores(t, false, func(t *testing.T, b storage.Bucket) {
		real := time.Now()
		old := putKeysJSON(t, b, real.Add(-2*time.Hour), 10)
		putKeysJSON(t, b, real.Add(-time.Hour), 20)
		var pins retention.PinSet
		unpin := pins.Pin("prod-a", old.ID)
		defer unpin()
		p := &retention.Pruner{Store: b, Destination: "store", Policy: retention.KeepLast(1), Kind: backup.KindKeysJSON, Pins: &pins, Now: time.Now}
		report, err := p.Prune(t.Context(), "prod-a")
		require.NoError(t, err)
		require.Equal(t, retention.Skipped, outcomes(report)[old.ID])
		require.Contains(t, keysUnder(t, b, "prod-a/"), "prod-a/"+old.DataKey)

		report, err = (&retention.Teardown{Store: b, Destination: "store", Pins: &pins}).Run(t.Context(), "prod-a")
		require.NoError(t, err)
		require.Equal(t, retention.Skipped, outcomes(report)[old.ID])
		require.ElementsMatch(t, []string{"prod-a/" + old.DataKey, "prod-a/" + backup.ManifestKey(old.DataKey)}, keysUnder(t, b, "prod-a/"))
	})
}

// TestTeardownDeletesSizeMismatched: a backup whose data object is not the
// size its manifest says is an invalid entry; teardown deletes its data
// with its manifest, leaving nothing of the cluster behind.
func TestTeardownDeletesSizeMismatched(t *testing.T) {
	onStores(t, false, func(t *testing.T, b storage.Bucket) {
		ms := []*backup.Manifest{fullAt(t, b, "hourly", time.Now().Add(-time.Hour), 1), fullAt(t, b, "hourly", time.Now(), 2)}
		require.NoError(t, b.Put(t.Context(), "prod-a/"+ms[0].DataKey, strings.NewReader("truncated"), nil))
		entries, err := backup.ListBackups(t.Context(), b, "prod-a")
		require.NoError(t, err)
		kinds := map[backup.Kind]int{}
		for _, e := range entries {
			kinds[e.Kind]++
		}
		require.Equal(t, map[backup.Kind]int{backup.KindInvalid: 1, backup.KindBackup: 1}, kinds, "the pair is one invalid entry")

		report, err := (&retention.Teardown{Store: b, Destination: "store"}).Run(t.Context(), "prod-a")
		require.NoError(t, err)
		require.Equal(t, 2, report.Count(retention.Deleted))
		require.Empty(t, keysUnder(t, b, "prod-a/"), "nothing of the cluster stays")
	})
}

// TestPruneOrphanAgeByStoreClock: a pruner whose clock runs two days fast
// does not take an upload in flight (a data object whose manifest is not
// written yet) for an old orphan: its age is the store's too, when an
// object stored since confirms the store's clock.
func TestPruneOrphanAgeByStoreClock(t *testing.T) {
	onStores(t, false, func(t *testing.T, b storage.Bucket) {
		fullAt(t, b, "hourly", time.Now().Add(-time.Hour), 1)
		inFlight := "prod-a/" + backup.DataKey(backup.BackupID("prod-a", "hourly", time.Now(), true), time.Now(), backup.Zstd, false)
		require.NoError(t, b.Put(t.Context(), inFlight, strings.NewReader("half a snapshot"), nil))
		fullAt(t, b, "daily", time.Now(), 2) // stored since: confirms the store's clock
		p := &retention.Pruner{Store: b, Destination: "store", Policy: retention.KeepLast(1),
			Now: func() time.Time { return time.Now().Add(48 * time.Hour) }}
		_, err := p.Prune(t.Context(), "prod-a")
		require.NoError(t, err)
		require.Contains(t, keysUnder(t, b, "prod-a/"), inFlight)
	})
}

// TestFastPrunerLeavesUploadInFlight: the same for a multipart upload
// still running: a pruner two days fast does not abort it.
func TestFastPrunerLeavesUploadInFlight(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	b, err := s3.New(srv.S3Options(bucket))
	require.NoError(t, err)
	fullAt(t, b, "hourly", time.Now().Add(-time.Hour), 1)
	key := "prod-a/" + backup.DataKey(backup.BackupID("prod-a", "hourly", time.Now(), true), time.Now(), backup.Zstd, false)
	core := &minio.Core{Client: srv.Client(t)}
	_, err = core.NewMultipartUpload(t.Context(), bucket, key, minio.PutObjectOptions{})
	require.NoError(t, err)
	// A backup stored since: the store's clock is confirmed past the
	// upload's start.
	fullAt(t, b, "daily", time.Now(), 2)
	p := &retention.Pruner{Store: b, Destination: "store", Policy: retention.KeepLast(1),
		Now: func() time.Time { return time.Now().Add(48 * time.Hour) }}
	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Empty(t, report.AbortedUploads)
	ups, err := srv.IncompleteUploads(t.Context(), bucket)
	require.NoError(t, err)
	require.Len(t, ups, 1, fmt.Sprint(ups))
}

// metricValue returns the value of the one series of name whose label has
// the given value (any series when no label is given).
func metricValue(t *testing.T, c prometheus.Collector, name string, label ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.NoError(t, err)
	var found []float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := len(label) < 2
			for _, l := range m.GetLabel() {
				if len(label) == 2 && l.GetName() == label[0] && l.GetValue() == label[1] {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				found = append(found, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				found = append(found, m.GetGauge().GetValue())
			}
		}
	}
	require.Len(t, found, 1, "series of %s %v", name, label)
	return found[0]
}

// TestPruneKeepsTheChainOfAScheduledBase: the window's base is a
// scheduled full backup taken while a chain ran (as a continuous job's
// cron schedule takes them). Restore replays a chain only from a full
// backup it continues, never from such a base, so the chain's own full
// backup and its segments before the base stay: a revision stored inside
// the window is restorable after the prune.
func TestPruneKeepsTheChainOfAScheduledBase(t *testing.T) {
	onStores(t, false, func(t *testing.T, b storage.Bucket) {
		real := time.Now()
		at := func(d time.Duration) time.Time { return real.Add(-d) }
		a1 := fullAt(t, b, "cont-a", at(3*time.Hour), 100)
		a2 := fullAt(t, b, "cont-a", at(time.Hour), 300)
		old := putSegment(t, b, at(150*time.Minute), 101, 200, a1.ID)
		recent := putSegment(t, b, at(50*time.Minute), 201, 350, a1.ID)
		p := &retention.Pruner{Store: storedAt(b, 2*time.Hour, recent, a1, a2, old), Destination: "store", Policy: retention.KeepLast(1), Name: "cont-a",
			Chains: &retention.ChainPolicy{Window: 90 * time.Minute}, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}
		report, err := p.Prune(t.Context(), "prod-a")
		require.NoError(t, err)
		got := outcomes(report)
		require.Equal(t, retention.Kept, got[a1.ID], "the chain's own full backup")
		require.Equal(t, retention.Kept, got[old.ID], "the chain's segment before the base")
		_, err = restore.FindPoint(t.Context(), []restore.Source{{Name: "store", Catalog: b}}, restore.Point{Cluster: "prod-a", Revision: 320})
		require.NoError(t, err, "revision 320, stored 50 minutes ago, inside the 90 minute window")
	})
}
