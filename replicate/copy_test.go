package replicate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

var t0 = time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)

func memBucket() storage.Bucket { return blob.New(memblob.OpenBucket(nil), nil) }

// stored commits a backup of opaque bytes on b, as the pipeline or the
// follower would: the copy never decodes them.
func stored(t *testing.T, b storage.Bucket, m backup.Manifest, data []byte) *backup.Manifest {
	t.Helper()
	sum := sha256.Sum256(data)
	m.Stored = backup.Digest{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	m.Raw = m.Stored
	m.Cluster, m.Destination, m.Compression, m.Completed = "prod", "src", backup.None, m.Created.Add(time.Second)
	m.ID = backup.BackupID(m.Cluster, m.Name, m.Created, true)
	m.DataKey = backup.DataKey(m.ID, m.Created, m.Compression, false)
	m.Run = "0123abcd"
	if m.Format == 0 {
		m.Format = backup.ManifestFormat
	}
	up := &backup.BucketUploader{Bucket: b}
	if err := up.Upload(context.Background(), &m, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := up.Commit(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func full(t *testing.T, b storage.Bucket, i int, low int64) *backup.Manifest {
	return stored(t, b, backup.Manifest{Name: "full", Created: t0.Add(time.Duration(i) * time.Minute),
		Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: low, High: low}}}, fmt.Appendf(nil, "full %d %s", i, strings.Repeat("x", 1000)))
}

func segment(t *testing.T, b storage.Bucket, chain *backup.Manifest, first, last int64) *backup.Manifest {
	return stored(t, b, backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta,
		Name: fmt.Sprintf("delta-%d", first), Created: chain.Created.Add(time.Duration(first) * time.Second),
		FirstRevision: first, LastRevision: last, Chain: chain.ID}, fmt.Appendf(nil, "segment %d-%d", first, last))
}

func copier(src, dst storage.Bucket) *Copier {
	return &Copier{Source: src, SourceName: "src", Target: Target{Name: "dst", Bucket: dst}}
}

func outcomes(rep *Report) string {
	var s []string
	for _, it := range rep.Items {
		s = append(s, string(it.Outcome))
	}
	return strings.Join(s, " ")
}

func listed(t *testing.T, b storage.Bucket) []backup.Entry {
	t.Helper()
	entries, err := backup.ListBackups(context.Background(), b, "prod")
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func TestCopyChainThenSkipsAll(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	for r := int64(11); r <= 20; r += 2 {
		segment(t, src, f, r, r+1)
	}
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{Chains: []string{f.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(rep); got != "copied copied copied copied copied copied" {
		t.Fatalf("outcomes %q", got)
	}
	if c := rep.Chains; len(c) != 1 || !c[0].Whole || c[0].Through != 20 {
		t.Fatalf("chains %+v", c)
	}
	for i, e := range listed(t, dst) {
		want := listed(t, src)[i]
		if e.Kind != want.Kind || e.Key != want.Key || e.Manifest.Destination != "dst" || !e.Manifest.Completed.Equal(want.Manifest.Completed) {
			t.Fatalf("target entry %d: %+v, source %+v", i, e, want)
		}
	}
	rep, err = copier(src, dst).Copy(ctx, "prod", Selection{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(rep); got != "skipped skipped skipped skipped skipped skipped" {
		t.Fatalf("second copy: outcomes %q", got)
	}
}

// flipping wraps a source and flips one byte of the object under key.
type flipping struct {
	storage.Bucket
	key string
}

func (f flipping) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := f.Bucket.Get(ctx, key)
	if err != nil || key != f.key {
		return rc, err
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, err
	}
	b[len(b)/2] ^= 1
	return io.NopCloser(bytes.NewReader(b)), nil
}

func TestCopyFlippedByteCommitsNothing(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	good := full(t, src, 0, 10)
	bad := full(t, src, 1, 20)
	c := copier(flipping{src, "prod/" + bad.DataKey}, dst)
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if !errors.Is(err, ErrDigestMismatch) || !errors.Is(err, backup.ErrIntegrity) {
		t.Fatalf("copy: %v, want a digest mismatch", err)
	}
	if got := outcomes(rep); got != "copied failed" {
		t.Fatalf("outcomes %q", got)
	}
	for info, err := range dst.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info.Key, bad.ID) {
			t.Fatalf("the target holds %s of the damaged backup", info.Key)
		}
	}
	if e := listed(t, dst); len(e) != 1 || e[0].ID != good.ID {
		t.Fatalf("target lists %+v", e)
	}
}

func TestCopyResumesDataWithoutManifest(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	// A copy killed between the data object and its manifest.
	m := *f
	m.Destination = "dst"
	rc, _ := src.Get(ctx, "prod/"+f.DataKey)
	if err := (&backup.BucketUploader{Bucket: dst}).Upload(ctx, &m, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{IDs: []string{f.ID}})
	if err != nil || outcomes(rep) != "resumed" {
		t.Fatalf("copy: %v, %q", err, outcomes(rep))
	}
	if e := listed(t, dst); len(e) != 1 || e[0].Kind != backup.KindBackup {
		t.Fatalf("target lists %+v", e)
	}
}

func TestCopyRefusesAnotherObjectUnderTheSameKey(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	if err := dst.Put(ctx, "prod/"+f.DataKey, strings.NewReader(strings.Repeat("y", int(f.Stored.Size))), nil); err != nil {
		t.Fatal(err)
	}
	other := full(t, src, 1, 20)
	m := *other
	m.Stored.SHA256 = strings.Repeat("0", 64)
	body, _ := m.Marshal()
	if err := dst.Put(ctx, "prod/"+backup.ManifestKey(other.DataKey), bytes.NewReader(body), nil); err != nil {
		t.Fatal(err)
	}
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true})
	if !errors.Is(err, ErrConflict) || outcomes(rep) != "failed failed" {
		t.Fatalf("copy: %v, %q", err, outcomes(rep))
	}
	rc, _ := dst.Get(ctx, "prod/"+f.DataKey)
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != strings.Repeat("y", int(f.Stored.Size)) {
		t.Fatal("the other object was overwritten")
	}
}

// TestCopyChainPrunedMeanwhileStopsAtTheHole prunes a segment from the
// source after the copy listed it: the segments after it are not copied,
// and the target's chain ends before the hole.
func TestCopyChainPrunedMeanwhileStopsAtTheHole(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	var segs []*backup.Manifest
	for r := int64(11); r <= 18; r += 2 {
		segs = append(segs, segment(t, src, f, r, r+1))
	}
	c := copier(src, dst)
	c.Observer = ObserverFunc(func(e Event) {
		if e.Kind == Done && e.ID == f.ID {
			// Pruned on the source while the copy runs.
			_ = src.Delete(ctx, "prod/"+backup.ManifestKey(segs[2].DataKey))
			_ = src.Delete(ctx, "prod/"+segs[2].DataKey)
		}
	})
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("copy: %v", err)
	}
	if got := outcomes(rep); got != "copied copied copied failed not-copied" {
		t.Fatalf("outcomes %q", got)
	}
	if ch := rep.Chains; len(ch) != 1 || ch[0].Whole || ch[0].Through != 14 {
		t.Fatalf("chains %+v", ch)
	}
	var last int64
	for _, e := range listed(t, dst) {
		if e.Kind == backup.KindDelta {
			if e.Manifest.FirstRevision != last+1 && last != 0 {
				t.Fatalf("the target's chain has a hole before %d", e.Manifest.FirstRevision)
			}
			last = e.Manifest.LastRevision
		}
	}
	if last != 14 {
		t.Fatalf("target chain ends at %d", last)
	}
}

func TestPlanSegmentBringsItsChain(t *testing.T) {
	src := memBucket()
	f := full(t, src, 0, 10)
	s1 := segment(t, src, f, 11, 12)
	s2 := segment(t, src, f, 13, 14)
	segment(t, src, f, 15, 16)
	lone := full(t, src, 5, 40)
	groups, err := plan(listed(t, src), Selection{IDs: []string{s2.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].full.ID != f.ID || len(groups[0].segments) != 2 ||
		groups[0].segments[0].ID != s1.ID || groups[0].segments[1].ID != s2.ID {
		t.Fatalf("groups %+v", groups)
	}
	groups, err = plan(listed(t, src), Selection{Since: lone.Created})
	if err != nil || len(groups) != 1 || groups[0].full.ID != lone.ID {
		t.Fatalf("since: %v %+v", err, groups)
	}
	if _, err := plan(listed(t, src), Selection{IDs: []string{"prod-nope"}}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestVerifyingReaderFailsTheLastRead(t *testing.T) {
	data := []byte(strings.Repeat("z", 1000))
	sum := sha256.Sum256(data)
	want := backup.Digest{Size: 1000, SHA256: hex.EncodeToString(sum[:])}
	for name, tc := range map[string]struct {
		data []byte
		ok   bool
	}{
		"same":    {data, true},
		"flipped": {append(append([]byte{}, data[:999]...), 'y'), false},
		"short":   {data[:999], false},
		"long":    {append(append([]byte{}, data...), 'z'), false},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := io.Copy(io.Discard, newVerifyingReader(bytes.NewReader(tc.data), want))
			if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestCopyCancelledAndRerun cancels copies at several points and reruns
// them: the target ends with exactly the source's backups, each listed
// once, and while stopped never lists a chain with a hole.
func TestCopyCancelledAndRerun(t *testing.T) {
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	for r := int64(11); r <= 40; r += 2 {
		segment(t, src, f, r, r+1)
	}
	full(t, src, 1, 50)
	for _, after := range []int{1, 2, 3, 4} {
		ctx, cancel := context.WithCancel(context.Background())
		c := copier(src, dst)
		done := 0
		c.Observer = ObserverFunc(func(e Event) {
			if e.Kind == Done && e.Item.Outcome == Copied {
				if done++; done == after {
					cancel()
				}
			}
		})
		if _, err := c.Copy(ctx, "prod", Selection{All: true}); !errors.Is(err, context.Canceled) {
			t.Fatalf("copy cancelled after %d: %v", after, err)
		}
		cancel()
		last := int64(10)
		for _, e := range listed(t, dst) {
			if e.Kind == backup.KindDelta {
				if e.Manifest.FirstRevision != last+1 {
					t.Fatalf("after a cancel: a hole before %d", e.Manifest.FirstRevision)
				}
				last = e.Manifest.LastRevision
			}
		}
	}
	rep, err := copier(src, dst).Copy(context.Background(), "prod", Selection{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count(Copied) == 0 || rep.Count(Failed) != 0 {
		t.Fatalf("rerun: %q", outcomes(rep))
	}
	want, got := listed(t, src), listed(t, dst)
	if len(got) != len(want) {
		t.Fatalf("target lists %d entries, source %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Kind != want[i].Kind || got[i].ID != want[i].ID {
			t.Fatalf("entry %d: %s %s, want %s %s", i, got[i].Kind, got[i].ID, want[i].Kind, want[i].ID)
		}
	}
}

func TestMetricsLagOfAFailedCopy(t *testing.T) {
	src, dst := memBucket(), memBucket()
	full(t, src, 0, 10)
	bad := full(t, src, 1, 20)
	c := copier(flipping{src, "prod/" + bad.DataKey}, dst)
	rep, err := c.Copy(context.Background(), "prod", Selection{All: true})
	if err == nil {
		t.Fatal("a flipped byte was copied")
	}
	m := NewMetrics()
	now := bad.Created.Add(time.Hour)
	m.Record(rep, now)
	labels := []string{"prod", "src", "dst"}
	if got := testutil.ToFloat64(m.lag.WithLabelValues(labels...)); got != 3600 {
		t.Fatalf("lag %v, want 3600", got)
	}
	if got := testutil.ToFloat64(m.behind.WithLabelValues(labels...)); got != 1 {
		t.Fatalf("behind %v", got)
	}
	if got := testutil.ToFloat64(m.fail.WithLabelValues(labels...)); got != 1 {
		t.Fatalf("failures %v", got)
	}
}

type readOnly struct{ storage.Bucket }

func (readOnly) ReadOnly() bool { return true }

func TestCopyRefusesReadOnlyTarget(t *testing.T) {
	src, dst := memBucket(), memBucket()
	full(t, src, 0, 10)
	rep, err := copier(src, readOnly{dst}).Copy(context.Background(), "prod", Selection{All: true})
	if !errors.Is(err, storage.ErrReadOnly) || rep != nil {
		t.Fatalf("copy to a read-only target: %v", err)
	}
}
