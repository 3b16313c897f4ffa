package replicate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// TestCopyReportsAManifestItCannotRead: the source holds, beside a good
// full backup, a manifest this version cannot read: of a newer format,
// of a kind it does not know, damaged, or naming a data object that is
// gone. A copy of all (or since before it, or of the backup name) copies
// the good backup and reports the other Failed with ErrInvalidSource, its
// error naming the manifest and what is wrong; nothing of it lands on the
// target, and the next copy reports it again. A copy since after it, or
// of another name's parsed manifest, does not select it.
func TestCopyReportsAManifestItCannotRead(t *testing.T) {
	for name, damage := range map[string]func(raw []byte) []byte{
		"newer format": func(raw []byte) []byte { return bytes.Replace(raw, []byte(`"format": 1,`), []byte(`"format": 9,`), 1) },
		"unknown kind": func(raw []byte) []byte { return append([]byte(`{"kind":"tarball",`), raw[1:]...) },
		"damaged":      func(raw []byte) []byte { return raw[:len(raw)/2] },
		"data gone":    nil,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			src := memBucket()
			created := time.Now().Add(-time.Hour).Truncate(time.Second)
			good := namedFull(t, src, "full", created, 10)
			bad := namedFull(t, src, "full", created.Add(time.Minute), 20)
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
			for _, sel := range []Selection{{All: true}, {Since: created}, {All: true, Name: "full"}} {
				dst := memBucket()
				for round := range 2 {
					rep, err := copier(src, dst).Copy(ctx, "prod", sel)
					want := "failed copied"
					if round == 1 {
						want = "failed skipped"
					}
					if !errors.Is(err, ErrInvalidSource) || outcomes(rep) != want {
						t.Fatalf("%+v, round %d: %v (%s); want ErrInvalidSource (%s)", sel, round, err, outcomes(rep), want)
					}
					it := rep.Items[0]
					if it.Kind != backup.KindInvalid || !errors.Is(it.Err, ErrInvalidSource) || !strings.Contains(it.Err.Error(), mkey) {
						t.Fatalf("%+v: item %+v: want the invalid manifest %s named", sel, it, mkey)
					}
					if damage == nil && !strings.Contains(it.Err.Error(), "missing") ||
						damage != nil && !errors.Is(it.Err, backup.ErrInvalidManifest) {
						t.Fatalf("%+v: the error does not say what is wrong: %v", sel, it.Err)
					}
				}
				if e := listed(t, dst); len(e) != 1 || e[0].ID != good.ID {
					t.Fatalf("%+v: the target lists %+v; want only %s", sel, e, good.ID)
				}
			}
			// Selections that do not take it: since after it (its store
			// time is the listing's date of it), another name's parsed
			// manifest.
			sels := []Selection{{Since: time.Now().Add(time.Hour)}}
			if damage == nil {
				sels = append(sels, Selection{All: true, Name: "other"})
			}
			for _, sel := range sels {
				if rep, err := copier(src, memBucket()).Copy(ctx, "prod", sel); err != nil || strings.Contains(outcomes(rep), "failed") {
					t.Fatalf("%+v: %v (%s); want nothing failed", sel, err, outcomes(rep))
				}
			}
		})
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
	src := memBucket()
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	namedFull(t, src, "full", created, 10)
	gone := namedFull(t, src, "full", created.Add(time.Minute), 20)
	_, mkey := sourceManifest(t, src, gone)
	c := copier(vanishing{Bucket: src, key: mkey}, memBucket())
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "copied" {
		t.Fatalf("copy: %v (%s); want the other backup copied alone", err, outcomes(rep))
	}
}
