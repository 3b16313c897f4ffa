package replicate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// sourceManifest returns the raw manifest of m on b, and its key.
func sourceManifest(t *testing.T, b storage.Bucket, m *backup.Manifest) ([]byte, string) {
	t.Helper()
	mkey := backup.ClusterPrefix("prod") + backup.ManifestKey(m.DataKey)
	rc, err := b.Get(context.Background(), mkey)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(raw), mkey
}

// TestCopyWritesTheManifestItParsed: a source manifest with a
// case-folded duplicate of a known field ("Stored", which the decoder
// folds onto "stored", the later key winning). The copy writes the
// manifest as this version parsed it: parsing on the target to the
// source's digest, a copy (IsCopy), skipped by the next copy.
func TestCopyWritesTheManifestItParsed(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := namedFull(t, src, "full", time.Now().Add(-time.Hour).Truncate(time.Second), 10)
	raw, mkey := sourceManifest(t, src, f)
	folded := []byte(`{"Stored":{"size":1,"sha256":"` + strings.Repeat("b", 64) + `"},`)
	folded = append(folded, raw[1:]...)
	if err := src.Put(ctx, mkey, bytes.NewReader(folded), nil); err != nil {
		t.Fatal(err)
	}
	if e := listed(t, src); len(e) != 1 || e[0].Manifest == nil || e[0].Manifest.Stored != f.Stored {
		t.Fatalf("the source lists %+v", e)
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil || outcomes(rep) != "copied" {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	e := listed(t, dst)
	if len(e) != 1 || e[0].Manifest == nil || e[0].Manifest.Stored != f.Stored || !IsCopy(e[0].Manifest) {
		t.Fatalf("the target lists %+v", e)
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil || outcomes(rep) != "skipped" {
		t.Fatalf("a second copy: %v (%s)", err, outcomes(rep))
	}
}

// TestCopyRefusesAManifestOfANewerVersion: source manifests with a field
// this version does not know, at the top or nested (a newer version's
// writer added them; the deep nesting once made a copy's manifest grow
// a thousandfold). A copy would drop them: the backup fails with
// ErrNewerManifest, nothing of it is written on the target, and its
// chain's segments are not copied on top of nothing.
func TestCopyRefusesAManifestOfANewerVersion(t *testing.T) {
	for name, field := range map[string]string{
		"top":    `"zNew":` + strings.Repeat("[", 3000) + strings.Repeat("]", 3000),
		"nested": `"etcd":{"revision":{"low":10,"high":10},"zNew":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			src, dst := memBucket(), memBucket()
			f := namedFull(t, src, "full", time.Now().Add(-time.Hour).Truncate(time.Second), 10)
			segment(t, src, f, 11, 20)
			raw, mkey := sourceManifest(t, src, f)
			newer := append(slices.Clone(raw[:len(raw)-1]), ","+field+"}"...)
			if err := src.Put(ctx, mkey, bytes.NewReader(newer), nil); err != nil {
				t.Fatal(err)
			}
			if e := listed(t, src); len(e) != 2 || e[0].Manifest == nil || e[0].Manifest.Stored != f.Stored {
				t.Fatalf("the source lists %+v", e)
			}
			rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true})
			if !errors.Is(err, ErrNewerManifest) || outcomes(rep) != "failed not-copied" {
				t.Fatalf("copy: %v (%s); want ErrNewerManifest", err, outcomes(rep))
			}
			if !strings.Contains(err.Error(), "version at least as new") {
				t.Errorf("the error does not say what to do: %v", err)
			}
			for info, err := range dst.List(ctx, "") {
				if err != nil {
					t.Fatal(err)
				}
				t.Errorf("the target holds %s", info.Key)
			}
		})
	}
}
