package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// TestCopyKeepsManifestFieldsItDoesNotKnow: a backup written by a newer
// version records a field this version does not know. The copy's
// manifest on the target keeps it, and is a copy (IsCopy) all the same.
func TestCopyKeepsManifestFieldsItDoesNotKnow(t *testing.T) {
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
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	obj["futureField"] = map[string]any{"needed": "by restore"}
	if raw, err = json.Marshal(obj); err != nil {
		t.Fatal(err)
	}
	if err := src.Put(ctx, mkey, bytes.NewReader(raw), nil); err != nil {
		t.Fatal(err)
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
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
	if !bytes.Contains(got, []byte(`"futureField": {`)) || !bytes.Contains(got, []byte(`"needed": "by restore"`)) {
		t.Fatalf("the target's manifest lost the source's field futureField:\n%s", got)
	}
	e := listed(t, dst)
	if len(e) != 1 || !IsCopy(e[0].Manifest) || e[0].Manifest.Destination != "dst" {
		t.Fatalf("the target lists %+v", e)
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil || outcomes(rep) != "skipped" {
		t.Fatalf("a second copy: %v (%s)", err, outcomes(rep))
	}
}
