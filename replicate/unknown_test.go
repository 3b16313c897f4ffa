package replicate

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// TestCopyWritesTheManifestItParsed: a source manifest (under
// backup.MaxManifestSize) with a deeply nested field this version does not
// know and a case-folded duplicate of a known field ("Stored", which the
// decoder folds onto "stored", the later key winning). The copy writes the
// manifest as this version parsed it: small, parsing on the target to the
// source's digest, a copy (IsCopy), skipped by the next copy.
func TestCopyWritesTheManifestItParsed(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := namedFull(t, src, "full", time.Now().Add(-time.Hour).Truncate(time.Second), 10)
	mkey := backup.ClusterPrefix("prod") + backup.ManifestKey(f.DataKey)
	rc, err := src.Get(ctx, mkey)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	raw = bytes.TrimSpace(raw)
	hostile := []byte(`{"Stored":{"size":1,"sha256":"` + strings.Repeat("b", 64) + `"},`)
	hostile = append(hostile, raw[1:len(raw)-1]...)
	hostile = append(hostile, `,"zNew":`+strings.Repeat("[", 3000)+strings.Repeat("]", 3000)+"}"...)
	if len(hostile) > backup.MaxManifestSize {
		t.Fatalf("source manifest of %d bytes", len(hostile))
	}
	if err := src.Put(ctx, mkey, bytes.NewReader(hostile), nil); err != nil {
		t.Fatal(err)
	}
	if e := listed(t, src); len(e) != 1 || e[0].Manifest == nil || e[0].Manifest.Stored != f.Stored {
		t.Fatalf("the source lists %+v", e)
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil || outcomes(rep) != "copied" {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	rc, err = dst.Get(ctx, mkey)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > backup.MaxManifestSize || bytes.Contains(got, []byte("zNew")) {
		t.Fatalf("the target's manifest (%d bytes) keeps the unknown field", len(got))
	}
	e := listed(t, dst)
	if len(e) != 1 || e[0].Manifest == nil || e[0].Manifest.Stored != f.Stored || !IsCopy(e[0].Manifest) {
		t.Fatalf("the target lists %+v", e)
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil || outcomes(rep) != "skipped" {
		t.Fatalf("a second copy: %v (%s)", err, outcomes(rep))
	}
}
