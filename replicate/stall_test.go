package replicate

import (
	"context"
	"errors"
	"io"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
)

// stallingSource serves the data object at key half, then sends nothing
// more until the reader's context ends, as a source whose connection hung.
type stallingSource struct {
	storage.Bucket
	key string
}

func (s stallingSource) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.Bucket.Get(ctx, key)
	if err != nil || key != s.key {
		return rc, err
	}
	return &stallingReader{rc: rc, ctx: ctx}, nil
}

type stallingReader struct {
	rc  io.ReadCloser
	ctx context.Context
	n   int
}

func (r *stallingReader) Read(b []byte) (int, error) {
	if r.n > 0 {
		<-r.ctx.Done()
		return 0, r.ctx.Err()
	}
	n, err := r.rc.Read(b[:min(len(b), 16)])
	r.n += n
	return n, err
}

func (r *stallingReader) Close() error { return r.rc.Close() }

// TestCopyStalledTransferFails: a source that stops sending mid-object
// fails that backup with ErrDestinationStalled after StallTimeout, commits
// nothing of it, and the copy goes on with the next backup.
func TestCopyStalledTransferFails(t *testing.T) {
	src, dst := memBucket(), memBucket()
	stalled := full(t, src, 0, 10)
	next := full(t, src, 1, 20)
	c := copier(stallingSource{src, "prod/" + stalled.DataKey}, dst)
	c.StallTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if ctx.Err() != nil {
		t.Fatal("the stalled transfer was never cancelled")
	}
	if !errors.Is(err, backup.ErrDestinationStalled) || outcomes(rep) != "failed copied" {
		t.Fatalf("copy: %v, %q", err, outcomes(rep))
	}
	if e := listed(t, dst); len(e) != 1 || e[0].ID != next.ID {
		t.Fatalf("target lists %+v", e)
	}
}

// TestCopyStalledReadBackFails: a target that stops sending the data
// object a copy reads back (Recheck) fails that backup with
// ErrDestinationStalled after StallTimeout, instead of hanging the copy.
func TestCopyStalledReadBackFails(t *testing.T) {
	src, dst := memBucket(), memBucket()
	b := full(t, src, 0, 10)
	if rep, err := copier(src, dst).Copy(context.Background(), "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	c := copier(src, stallingSource{dst, "prod/" + b.DataKey})
	c.Recheck, c.StallTimeout = true, 100*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if ctx.Err() != nil {
		t.Fatal("the stalled read-back was never cancelled")
	}
	if !errors.Is(err, backup.ErrDestinationStalled) || outcomes(rep) != "failed" {
		t.Fatalf("copy: %v, %q", err, outcomes(rep))
	}
}

// hangingList is a catalog whose listings send nothing until their
// context ends, as a store whose connection hung.
type hangingList struct{ storage.Bucket }

func (hangingList) List(ctx context.Context, _ string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		<-ctx.Done()
		yield(storage.ObjectInfo{}, ctx.Err())
	}
}

// TestCopyStalledListingFails: a source whose listing hangs fails the
// copy with ErrDestinationStalled after StallTimeout; a target's that
// hangs has each backup looked at alone.
func TestCopyStalledListingFails(t *testing.T) {
	src, dst := memBucket(), memBucket()
	full(t, src, 0, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := copier(hangingList{src}, dst)
	c.StallTimeout = 100 * time.Millisecond
	if _, err := c.Copy(ctx, "prod", Selection{All: true}); ctx.Err() != nil || !errors.Is(err, backup.ErrDestinationStalled) {
		t.Fatalf("copy from a hanging source: %v (context: %v)", err, ctx.Err())
	}
	c = copier(src, hangingList{dst})
	c.StallTimeout = 100 * time.Millisecond
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if ctx.Err() != nil || err != nil || outcomes(rep) != "copied" {
		t.Fatalf("copy to a target whose listing hangs: %v, %q (context: %v)", err, outcomes(rep), ctx.Err())
	}
}

// TestCopyStalledManifestReadFails: a target that stops sending a
// manifest the copy looks at fails the backup with ErrDestinationStalled
// after StallTimeout instead of hanging the copy.
func TestCopyStalledManifestReadFails(t *testing.T) {
	src, dst := memBucket(), memBucket()
	b := full(t, src, 0, 10)
	mkey := "prod/" + backup.ManifestKey(b.DataKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	c := copier(src, stallingSource{dst, mkey})
	c.StallTimeout = 100 * time.Millisecond
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if ctx.Err() != nil || !errors.Is(err, backup.ErrDestinationStalled) || outcomes(rep) != "failed" {
		t.Fatalf("copy to a target whose manifest stalls: %v, %q (context: %v)", err, outcomes(rep), ctx.Err())
	}
}

// deadTarget is a target whose Stat, manifest writes or lock requests
// (as chosen) never answer: a store that stopped answering after the
// listing. Only the caller's context ends them.
type deadTarget struct {
	storage.Bucket
	stat, commit, lock bool
}

func (d deadTarget) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if d.stat {
		<-ctx.Done()
		return storage.ObjectInfo{}, ctx.Err()
	}
	return d.Bucket.Stat(ctx, key)
}

func (d deadTarget) PutIfAbsent(ctx context.Context, key string, r io.Reader, o *storage.PutOptions) error {
	if d.commit && strings.HasSuffix(key, backup.ManifestSuffix) {
		<-ctx.Done()
		return ctx.Err()
	}
	return storage.PutIfAbsent(ctx, d.Bucket, key, r, o)
}

func (d deadTarget) ObjectLock() destination.ObjectLock {
	if !d.lock {
		return destination.ObjectLock{}
	}
	return destination.ObjectLock{Mode: storage.Governance, RetainFor: time.Hour}
}

func (d deadTarget) Retention(ctx context.Context, _ string) (storage.Retention, error) {
	<-ctx.Done()
	return storage.Retention{}, ctx.Err()
}

func (d deadTarget) SetRetention(ctx context.Context, _ string, _ storage.Retention) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestCopyStalledTargetRequestFails: a target that stops answering a
// Stat of a data object, a manifest's write or a lock's read fails the
// backup with ErrDestinationStalled after StallTimeout, as a stalled
// transfer or read does, instead of holding the copy until its caller
// gives up.
func TestCopyStalledTargetRequestFails(t *testing.T) {
	for name, target := range map[string]func(storage.Bucket) storage.Bucket{
		"stat":   func(b storage.Bucket) storage.Bucket { return deadTarget{Bucket: b, stat: true} },
		"commit": func(b storage.Bucket) storage.Bucket { return deadTarget{Bucket: b, commit: true} },
		"lock":   func(b storage.Bucket) storage.Bucket { return deadTarget{Bucket: b, lock: true} },
	} {
		t.Run(name, func(t *testing.T) {
			src, dst := memBucket(), memBucket()
			full(t, src, 0, 10)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if name == "lock" { // the backup is there, its lock is looked at
				if _, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
					t.Fatal(err)
				}
			}
			c := copier(src, target(dst))
			c.StallTimeout = 100 * time.Millisecond
			rep, err := c.Copy(ctx, "prod", Selection{All: true})
			if ctx.Err() != nil || !errors.Is(err, backup.ErrDestinationStalled) || outcomes(rep) != "failed" {
				t.Fatalf("copy to a target whose %s hangs: %v, %q (context: %v)", name, err, outcomes(rep), ctx.Err())
			}
		})
	}
}

// deadAfterLastByte is a target that reads a data object's body to its
// end, then never answers: a store that stopped answering as the last
// part was sent (a single PutObject, a multipart completion, a write to
// a hung mount). Only the caller's context ends the request.
type deadAfterLastByte struct{ storage.Bucket }

func (d deadAfterLastByte) PutIfAbsent(ctx context.Context, key string, r io.Reader, o *storage.PutOptions) error {
	if strings.HasSuffix(key, backup.ManifestSuffix) {
		return storage.PutIfAbsent(ctx, d.Bucket, key, r, o)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestCopyTargetStalledAfterLastByteFails: StallTimeout bounds a data
// object's upload after the source was read to its end too: a target
// that took every byte and never answers fails the backup with
// ErrDestinationStalled, not when the caller gives up.
func TestCopyTargetStalledAfterLastByteFails(t *testing.T) {
	src, dst := memBucket(), memBucket()
	full(t, src, 0, 10)
	c := copier(src, deadAfterLastByte{dst})
	c.StallTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := c.Copy(ctx, "prod", Selection{All: true})
	if ctx.Err() != nil || !errors.Is(err, backup.ErrDestinationStalled) || outcomes(rep) != "failed" {
		t.Fatalf("copy to a target that hangs after the last byte: %v, %q (context: %v)", err, outcomes(rep), ctx.Err())
	}
}
