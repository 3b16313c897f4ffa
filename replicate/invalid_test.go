package replicate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// TestCopyReportsAManifestItCannotRead: the source holds, beside a good
// full backup, a manifest this version cannot read: of a newer format,
// of a kind it does not know, damaged, or naming a data object that is
// gone. A copy of all (or since before it, or of its backup name)
// copies the good backup and reports the other NotCopied with
// ErrInvalidSource, its error naming the manifest and what is wrong,
// without failing; nothing of it lands on the target, the next copy
// reports it again, and the metrics count it apart from the backups
// the target lacks. A copy since after it, or of another name, does not
// select it.
func TestCopyReportsAManifestItCannotRead(t *testing.T) {
	for name, damage := range map[string]func(raw []byte) []byte{
		"newer format": func(raw []byte) []byte { return bytes.Replace(raw, []byte(`"format": 1,`), []byte(`"format": 9,`), 1) },
		"unknown kind": func(raw []byte) []byte { return append([]byte(`{"kind":"tarball",`), raw[1:]...) },
		"damaged":      func(raw []byte) []byte { return raw[:len(raw)/2] },
		"data gone":    nil,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			src, created, good, bad := twoFulls(t)
			raw, mkey := sourceManifest(t, src, bad)
			if damage == nil {
				if err := src.Delete(ctx, backup.ClusterPrefix("prod")+bad.DataKey); err != nil {
					t.Fatal(err)
				}
			} else {
				changed := damage(raw)
				if bytes.Equal(changed, raw) {
					t.Fatalf("the damage changed nothing in %s", raw)
				}
				if err := src.Put(ctx, mkey, bytes.NewReader(changed), nil); err != nil {
					t.Fatal(err)
				}
			}
			sels := []Selection{{All: true}, {Since: created}}
			if name != "damaged" {
				sels = append(sels, Selection{All: true, Name: "full"})
			}
			for _, sel := range sels {
				dst := memBucket()
				for round := range 2 {
					rep, err := copier(src, dst).Copy(ctx, "prod", sel)
					want := "not-copied copied"
					if round == 1 {
						want = "not-copied skipped"
					}
					if err != nil || outcomes(rep) != want {
						t.Fatalf("%+v, round %d: %v (%s); want %s", sel, round, err, outcomes(rep), want)
					}
					it := rep.Items[0]
					if it.Kind != backup.KindInvalid || !it.InvalidSource() || !strings.Contains(it.Err.Error(), mkey) {
						t.Fatalf("%+v: item %+v: want the invalid manifest %s named", sel, it, mkey)
					}
					if damage == nil && !strings.Contains(it.Err.Error(), "missing") ||
						damage != nil && !errors.Is(it.Err, backup.ErrInvalidManifest) {
						t.Fatalf("%+v: the error does not say what is wrong: %v", sel, it.Err)
					}
					m := NewMetrics()
					m.Record(rep, time.Now())
					labels := []string{"prod", "src", "dst"}
					if n := testutil.ToFloat64(m.invalid.WithLabelValues(append(labels, sel.Name)...)); n != 1 {
						t.Fatalf("%+v: invalid source manifests %v, want 1", sel, n)
					}
					if n, lag := testutil.ToFloat64(m.behind.WithLabelValues(labels...)), testutil.ToFloat64(m.lag.WithLabelValues(labels...)); n != 0 || lag != 0 {
						t.Fatalf("%+v: behind %v, lag %v: the target lacks no backup", sel, n, lag)
					}
				}
				if e := listed(t, dst); len(e) != 1 || e[0].ID != good.ID {
					t.Fatalf("%+v: the target lists %+v; want only %s", sel, e, good.ID)
				}
			}
			// Selections that do not take it: since after it (dated by
			// its creation, or the damaged one by its store's write),
			// another name (but for the damaged manifest: it may be any
			// name's).
			none := []Selection{{Since: created.Add(2 * time.Minute)}, {All: true, Name: "other"}}
			if name == "damaged" {
				none = []Selection{{Since: time.Now().Add(time.Hour)}}
			}
			for _, sel := range none {
				if rep, err := copier(src, memBucket()).Copy(ctx, "prod", sel); err != nil || strings.Contains(outcomes(rep), "not-copied") {
					t.Fatalf("%+v: %v (%s); want nothing reported", sel, err, outcomes(rep))
				}
			}
			if rep, err := copier(src, memBucket()).Copy(ctx, "prod", Selection{All: true, Name: "other"}); name == "damaged" && (err != nil || outcomes(rep) != "not-copied") {
				t.Fatalf("a damaged manifest of any name, copy of another name: %v (%s); want it reported", err, outcomes(rep))
			}
		})
	}
}

// TestCopyInvalidSourceOutsideTheRetention: a manifest this version
// cannot read, dated (by its own creation time) before the oldest backup
// a retention-scoped selection copies, is not reported: the plan drops
// backups that old. One dated within it is.
func TestCopyInvalidSourceOutsideTheRetention(t *testing.T) {
	ctx := context.Background()
	src := memBucket()
	now := time.Now().Truncate(time.Second)
	old := namedFull(t, src, "full", now.Add(-365*24*time.Hour), 10)
	namedFull(t, src, "full", now.Add(-2*time.Hour), 20)
	recent := namedFull(t, src, "full", now.Add(-time.Hour), 30)
	for _, m := range []*backup.Manifest{old, recent} {
		raw, mkey := sourceManifest(t, src, m)
		if err := src.Put(ctx, mkey, bytes.NewReader(bytes.Replace(raw, []byte(`"format": 1,`), []byte(`"format": 9,`), 1)), nil); err != nil {
			t.Fatal(err)
		}
	}
	keep := retention.Policy{KeepWithin: 24 * time.Hour}
	chains := retention.PointInTime(24 * time.Hour)
	for _, sel := range []Selection{{All: true, Retention: &keep}, {All: true, Retention: &keep, PointInTime: &chains}} {
		rep, err := copier(src, memBucket()).Copy(ctx, "prod", sel)
		if err != nil || outcomes(rep) != "not-copied copied" || !strings.Contains(rep.Items[0].Err.Error(), recent.ID) {
			t.Fatalf("%+v: %v (%s) %+v; want the recent invalid manifest alone reported", sel, err, outcomes(rep), rep.Items)
		}
	}
}

// listedLate lists a source whose listing misses one data object: the
// backup committed while the listing ran (data object, then manifest),
// and a store that lists in no order listed its manifest, not its data.
type listedLate struct {
	storage.Bucket
	key string
}

func (b listedLate) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range b.Bucket.List(ctx, prefix) {
			if err == nil && info.Key == b.key && prefix != b.key {
				continue
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

// TestCopyIgnoresABackupCommittedWhileListing: a manifest listed without
// its data object, whose data object is there when looked at again, is a
// backup committed while the listing ran: not reported.
func TestCopyIgnoresABackupCommittedWhileListing(t *testing.T) {
	ctx := context.Background()
	src, _, _, late := twoFulls(t)
	c := copier(listedLate{Bucket: src, key: backup.ClusterPrefix("prod") + late.DataKey}, memBucket())
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "copied" {
		t.Fatalf("copy: %v (%s); want the other backup copied alone", err, outcomes(rep))
	}
}

// vanishing reads one manifest as gone: a prune deleted it between the
// source's listing and the read of its manifests.
type vanishing struct {
	storage.Bucket
	key string
}

func (b vanishing) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == b.key {
		return nil, storage.ErrNotFound
	}
	return b.Bucket.Get(ctx, key)
}

// TestCopyIgnoresAManifestPrunedWhileListing: a manifest listed but gone
// when read (a prune of the source meanwhile) is no longer the source's:
// the copy does not report it.
func TestCopyIgnoresAManifestPrunedWhileListing(t *testing.T) {
	ctx := context.Background()
	src, _, _, gone := twoFulls(t)
	_, mkey := sourceManifest(t, src, gone)
	c := copier(vanishing{Bucket: src, key: mkey}, memBucket())
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "copied" {
		t.Fatalf("copy: %v (%s); want the other backup copied alone", err, outcomes(rep))
	}
}

// newerFormat rewrites m's manifest on b as a newer version's (format 9).
func newerFormat(t *testing.T, b storage.Bucket, m *backup.Manifest) string {
	t.Helper()
	raw, mkey := sourceManifest(t, b, m)
	changed := bytes.Replace(raw, []byte(`"format": `), []byte(`"format": 9`), 1)
	if bytes.Equal(changed, raw) {
		t.Fatalf("no format in %s", raw)
	}
	if err := b.Put(context.Background(), mkey, bytes.NewReader(changed), nil); err != nil {
		t.Fatal(err)
	}
	return mkey
}

// TestCopyNamedReportsItsChainsSegment: a segment of an older version
// (no config recorded) on the chain of the name's full backup, its
// manifest of a newer format or its data object gone, is reported to a
// copy of that name, not to another name's.
func TestCopyNamedReportsItsChainsSegment(t *testing.T) {
	for _, gone := range []bool{false, true} {
		ctx := context.Background()
		src := memBucket()
		f := namedFull(t, src, "full", time.Now().Add(-time.Hour).Truncate(time.Second), 10)
		segment(t, src, f, 11, 12)
		last := segment(t, src, f, 13, 14)
		if gone {
			if err := src.Delete(ctx, backup.ClusterPrefix("prod")+last.DataKey); err != nil {
				t.Fatal(err)
			}
		} else {
			newerFormat(t, src, last)
		}
		rep, err := copier(src, memBucket()).Copy(ctx, "prod", Selection{All: true, Name: "full"})
		if err != nil || !strings.Contains(outcomes(rep), "not-copied") {
			t.Fatalf("data gone %v: %v (%s); want the segment reported", gone, err, outcomes(rep))
		}
		rep, err = copier(src, memBucket()).Copy(ctx, "prod", Selection{All: true, Name: "other"})
		if err != nil || outcomes(rep) != "" {
			t.Fatalf("data gone %v, another name: %v (%s); want nothing", gone, err, outcomes(rep))
		}
	}
}

// TestCopyInvalidSourceReadLeniently: a newer version's manifest whose
// field changed type is still attributed by the fields that decode (its
// name, its creation time), and the source's manifests are each read
// once (the listing keeps what decoded: backup.Entry.Unverified).
func TestCopyInvalidSourceReadLeniently(t *testing.T) {
	ctx := context.Background()
	src, _, _, bad := twoFulls(t)
	raw, mkey := sourceManifest(t, src, bad)
	changed := bytes.Replace(raw, []byte(`"format": 1,`), []byte(`"format": "2",`), 1)
	if err := src.Put(ctx, mkey, bytes.NewReader(changed), nil); err != nil {
		t.Fatal(err)
	}
	reads := &countingGets{Bucket: src}
	rep, err := copier(reads, memBucket()).Copy(ctx, "prod", Selection{All: true, Name: "other"})
	if err != nil || outcomes(rep) != "" {
		t.Fatalf("another name: %v (%s); want nothing", err, outcomes(rep))
	}
	rep, err = copier(src, memBucket()).Copy(ctx, "prod", Selection{All: true, Name: "full"})
	if err != nil || outcomes(rep) != "not-copied copied" || !rep.Items[0].Created.Equal(bad.Created) {
		t.Fatalf("its name: %v (%s) %+v; want it reported, dated %v", err, outcomes(rep), rep.Items, bad.Created)
	}
	if n := reads.reads(mkey); n != 1 {
		t.Fatalf("the invalid manifest was read %d times, want once", n)
	}
}

// countingGets counts the reads of each key.
// The listing reads manifests in parallel.
type countingGets struct {
	storage.Bucket
	mu sync.Mutex
	n  map[string]int
}

func (b *countingGets) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	b.mu.Lock()
	if b.n == nil {
		b.n = map[string]int{}
	}
	b.n[key]++
	b.mu.Unlock()
	return b.Bucket.Get(ctx, key)
}

// reads is how many times key was read.
func (b *countingGets) reads(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[key]
}

// TestCopyReportsAManifestUnderAnotherName: a valid manifest stored under
// a key that is not its own (its data object is there) is reported, not
// taken for a backup committed while listing.
func TestCopyReportsAManifestUnderAnotherName(t *testing.T) {
	ctx := context.Background()
	src := memBucket()
	m := namedFull(t, src, "full", time.Now().Add(-time.Hour).Truncate(time.Second), 10)
	raw, mkey := sourceManifest(t, src, m)
	moved := strings.Replace(mkey, "prod-full", "prod-moved", 1)
	if moved == mkey {
		t.Fatalf("cannot rename %s", mkey)
	}
	if err := src.Put(ctx, moved, bytes.NewReader(raw), nil); err != nil {
		t.Fatal(err)
	}
	if err := src.Delete(ctx, mkey); err != nil {
		t.Fatal(err)
	}
	rep, err := copier(src, memBucket()).Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "not-copied" || !rep.Items[0].InvalidSource() {
		t.Fatalf("copy: %v (%s); want the misnamed manifest reported", err, outcomes(rep))
	}
}

// TestCopyNamedSegmentWhoseFullIsGone: an older version's segment (no
// config) of a newer format, on a chain whose full backup is gone from
// the source (pruned, compacted), is attributed by its chain's ID: to the
// name it carries, not to another; a segment whose kind decoded as
// another type is still taken for a segment of its chain.
func TestCopyNamedSegmentWhoseFullIsGone(t *testing.T) {
	for _, kindTypeChanged := range []bool{false, true} {
		ctx := context.Background()
		src := memBucket()
		f := namedFull(t, src, "full", time.Now().Add(-time.Hour).Truncate(time.Second), 10)
		seg := segment(t, src, f, 11, 12)
		mkey := newerFormat(t, src, seg)
		if kindTypeChanged {
			raw, _ := sourceManifest(t, src, seg)
			changed := bytes.Replace(raw, []byte(`"kind": "delta"`), []byte(`"kind": {"v": "delta"}`), 1)
			if bytes.Equal(changed, raw) {
				t.Fatalf("no kind in %s", raw)
			}
			if err := src.Put(ctx, mkey, bytes.NewReader(changed), nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, e := range listed(t, src) {
			if e.Kind == backup.KindBackup {
				for _, key := range []string{e.Key, e.ManifestKey} {
					if err := src.Delete(ctx, key); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		rep, err := copier(src, memBucket()).Copy(ctx, "prod", Selection{All: true, Name: "other"})
		if err != nil || outcomes(rep) != "" {
			t.Fatalf("kind changed %v, another name: %v (%s); want nothing", kindTypeChanged, err, outcomes(rep))
		}
		rep, err = copier(src, memBucket()).Copy(ctx, "prod", Selection{All: true, Name: "full"})
		if err != nil || outcomes(rep) != "not-copied" {
			t.Fatalf("kind changed %v, its name: %v (%s); want it reported", kindTypeChanged, err, outcomes(rep))
		}
	}
}

// twoFulls returns a source holding two full backups of name "full",
// created an hour ago (at created) and a minute later.
func twoFulls(t *testing.T) (src storage.Bucket, created time.Time, first, second *backup.Manifest) {
	src = memBucket()
	created = time.Now().Add(-time.Hour).Truncate(time.Second)
	first = namedFull(t, src, "full", created, 10)
	second = namedFull(t, src, "full", created.Add(time.Minute), 20)
	return src, created, first, second
}
