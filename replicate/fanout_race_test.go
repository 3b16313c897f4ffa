package replicate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// fanOutBase returns a full backup's manifest as the pipeline would build it for
// one run fanned out to two destinations (one run token for both).
func fanOutBase(data []byte) backup.Manifest {
	sum := sha256.Sum256(data)
	m := backup.Manifest{Format: backup.ManifestFormat, Name: "hourly", Cluster: "prod", Created: t0,
		Compression: backup.None, Run: "0a1b2c3d",
		Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: 10, High: 10}}}
	m.Stored = backup.Digest{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	m.Raw = m.Stored
	m.ID = backup.BackupID(m.Cluster, m.Name, m.Created, true)
	m.DataKey = backup.DataKey(m.ID, m.Created, m.Compression, false)
	return m
}

// A backup fanned out to primary and vault: primary committed, vault's data
// uploaded and its commit a moment later. A replication copy primary->vault
// runs in between. It used to "resume" the run's uncommitted data object
// (same run token) and commit its own manifest; the run's Commit then met a
// different manifest and removed "its" data object: a committed manifest
// without data. The copy now leaves it pending and the run commits.
func TestCopyRacingFanOutRunKeepsItsData(t *testing.T) {
	ctx := context.Background()
	data := []byte(strings.Repeat("snapshot bytes ", 100))
	base := fanOutBase(data)
	primary, vault := memBucket(), memBucket()
	mp := base
	mp.Destination, mp.Completed = "primary", t0.Add(time.Second)
	up := &backup.BucketUploader{Bucket: primary}
	if err := up.Upload(ctx, &mp, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := up.Commit(ctx, &mp); err != nil {
		t.Fatal(err)
	}
	mv := base
	mv.Destination = "vault"
	vup := &backup.BucketUploader{Bucket: vault}
	if err := vup.Upload(ctx, &mv, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	c := &Copier{Source: primary, SourceName: "primary", Target: Target{Name: "vault", Bucket: vault}}
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "pending" {
		t.Fatalf("copy racing the run: %v, %q; want the run's data object left alone", err, outcomes(rep))
	}
	// The run's commit on vault, 5 ms after primary's.
	mv.Completed = t0.Add(time.Second + 5*time.Millisecond)
	if err := vup.Commit(ctx, &mv); err != nil {
		t.Fatalf("backup run's commit on vault: %v", err)
	}
	assertCommittedWithData(t, vault, base.DataKey)
	if rep, err = c.Copy(ctx, "prod", Selection{All: true}); err != nil || outcomes(rep) != "skipped" {
		t.Fatalf("rerun of the copy: %v, %q", err, outcomes(rep))
	}
}

// assertCommittedWithData fails unless b holds the manifest of dataKey and
// its data object.
func assertCommittedWithData(t *testing.T, b storage.Bucket, dataKey string) {
	t.Helper()
	_, serr := b.Stat(context.Background(), "prod/"+dataKey)
	_, merr := b.Stat(context.Background(), "prod/"+backup.ManifestKey(dataKey))
	if merr != nil || serr != nil {
		t.Fatalf("manifest stat: %v; data object stat: %v", merr, serr)
	}
}

// hookBucket runs before() once, just before the first write of key.
type hookBucket struct {
	storage.Bucket
	key    string
	before func()
}

func (h *hookBucket) fire(key string) {
	if key == h.key && h.before != nil {
		f := h.before
		h.before = nil
		f()
	}
}

func (h *hookBucket) Put(ctx context.Context, key string, r io.Reader, o *storage.PutOptions) error {
	h.fire(key)
	return h.Bucket.Put(ctx, key, r, o)
}

func (h *hookBucket) PutIfAbsent(ctx context.Context, key string, r io.Reader, o *storage.PutOptions) error {
	h.fire(key)
	return storage.PutIfAbsent(ctx, h.Bucket, key, r, o)
}

// The other order: the run's commit on vault lands between the copier's
// look and its commit. The copy used to take the run's data object (same
// run token) for its own, and its refused commit removed it under the
// run's committed manifest. Now it leaves that object alone (pending) and
// writes nothing; the hook commits the run's manifest before any write of
// the copy's, or after the copy when it wrote none. The run's backup keeps
// its data.
func TestCopyRefusedCommitKeepsRunsData(t *testing.T) {
	ctx := context.Background()
	data := []byte(strings.Repeat("snapshot bytes ", 100))
	base := fanOutBase(data)
	primary, raw := memBucket(), memBucket()
	mp := base
	mp.Destination, mp.Completed = "primary", t0.Add(time.Second)
	up := &backup.BucketUploader{Bucket: primary}
	if err := up.Upload(ctx, &mp, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := up.Commit(ctx, &mp); err != nil {
		t.Fatal(err)
	}
	mv := base
	mv.Destination = "vault"
	vup := &backup.BucketUploader{Bucket: raw}
	if err := vup.Upload(ctx, &mv, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	mkey := "prod/" + backup.ManifestKey(base.DataKey)
	vault := &hookBucket{Bucket: raw, key: mkey, before: func() {
		mv.Completed = t0.Add(time.Second + 5*time.Millisecond)
		if err := vup.Commit(ctx, &mv); err != nil {
			t.Errorf("run's commit: %v", err)
		}
	}}
	c := &Copier{Source: primary, SourceName: "primary", Target: Target{Name: "vault", Bucket: vault}}
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "pending" {
		t.Fatalf("copy racing the run: %v, %q; want the run's data object left alone", err, outcomes(rep))
	}
	if vault.before != nil {
		vault.before() // the copy wrote nothing: the run commits now
	}
	assertCommittedWithData(t, raw, base.DataKey)
}

// TestCopyResumesDataWithoutToken: a data object without a manifest and
// without any run token (a store keeping no metadata, a file write killed
// before its attributes) is verified and committed: no writer can prove it
// its own, so no refused commit removes it after.
func TestCopyResumesDataWithoutToken(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	rc, err := src.Get(ctx, "prod/"+f.DataKey)
	if err != nil {
		t.Fatal(err)
	}
	err = dst.Put(ctx, "prod/"+f.DataKey, rc, nil)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "resumed" {
		t.Fatalf("copy: %v, %q", err, outcomes(rep))
	}
	assertCommittedWithData(t, dst, f.DataKey)
}
