package storagetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage"
)

// The concurrency contract: what several writers, listers and deleters of
// one bucket, in one process or many, may rely on. The checks return an
// error instead of failing a test, so that a test can also show them
// failing on a bucket that breaks the contract.

// CheckExclusiveRace starts writers goroutines that race to create key
// with PutIfAbsent, each with a body of its own of size bytes, released
// together. It returns an error unless exactly one succeeded and key holds
// the winner's bytes. The others fail, usually with storage.ErrExist; a
// store may also refuse a loser's body before it has read all of it, which
// the client sees as a broken connection: what matters is that no loser
// succeeds. The bucket must implement storage.ExclusivePutter.
func CheckExclusiveRace(ctx context.Context, b storage.Bucket, key string, writers int, size int64) error {
	ep, ok := b.(storage.ExclusivePutter)
	if !ok {
		return errors.New("bucket has no PutIfAbsent")
	}
	errs := make([]error, writers)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range writers {
		wg.Go(func() {
			start.Wait()
			errs[i] = ep.PutIfAbsent(ctx, key, data(raceSeed(key, i), size), nil)
		})
	}
	start.Done()
	wg.Wait()

	winner := -1
	var problems []string
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			problems = append(problems, fmt.Sprintf("writers %d and %d both succeeded", winner, i))
		case err == nil:
			winner = i
		}
	}
	if winner < 0 {
		problems = append(problems, "no writer succeeded")
	} else if err := checkContent(ctx, b, key, raceSeed(key, winner), size); err != nil {
		problems = append(problems, fmt.Sprintf("after writer %d won: %v", winner, err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("exclusive race on %q: %s", key, strings.Join(problems, "; "))
	}
	return nil
}

func raceSeed(key string, i int) uint64 {
	sum := sha256.Sum256([]byte(key))
	return uint64(sum[0])<<8 | uint64(sum[1]) + uint64(1000+i)
}

// checkContent reports whether key holds data(seed, size).
func checkContent(ctx context.Context, b storage.Bucket, key string, seed uint64, size int64) error {
	rc, err := b.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		return fmt.Errorf("read %q: %w", key, err)
	}
	var got [32]byte
	copy(got[:], h.Sum(nil))
	if n != size || got != digest(seed, size) {
		return fmt.Errorf("%q holds %d bytes that are not the winner's %d", key, n, size)
	}
	return nil
}

// CheckListDuringWrites lists prefix rounds times while writers put and
// delete other keys under it. stable keys, already stored under prefix,
// are neither written nor deleted meanwhile. It returns an error when a
// listing fails, is out of order, misses a stable key, or shows a key that
// nobody wrote (a temporary file, a half-written object's name).
func CheckListDuringWrites(ctx context.Context, b storage.Bucket, prefix string, stable []string, rounds int) error {
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		churned sync.Map // keys the writers may have created
		werr    atomic.Pointer[error]
	)
	for w := range 2 {
		wg.Go(func() {
			// Each writer removes what it wrote before it stops.
			for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
				key := fmt.Sprintf("%schurn-%d-%03d", prefix, w, i%20)
				churned.Store(key, true)
				err := b.Put(ctx, key, bytes.NewReader(bytes.Repeat([]byte{byte(i)}, 64<<10)), nil)
				if err == nil {
					err = b.Delete(ctx, key)
				}
				if err != nil {
					werr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	err := listRounds(ctx, b, prefix, stable, rounds, &churned)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		return err
	}
	if p := werr.Load(); p != nil {
		return fmt.Errorf("writer beside the listings: %w", *p)
	}
	return nil
}

func listRounds(ctx context.Context, b storage.Bucket, prefix string, stable []string, rounds int, churned *sync.Map) error {
	for round := range rounds {
		var got []string
		for info, err := range b.List(ctx, prefix) {
			if err != nil {
				return fmt.Errorf("listing %d: %w", round, err)
			}
			got = append(got, info.Key)
		}
		if !slices.IsSorted(got) {
			return fmt.Errorf("listing %d is out of order", round)
		}
		for _, k := range stable {
			if _, found := slices.BinarySearch(got, k); !found {
				return fmt.Errorf("listing %d misses %q, which existed throughout", round, k)
			}
		}
		for _, k := range got {
			_, written := churned.Load(k)
			if _, isStable := slices.BinarySearch(stable, k); !isStable && !written {
				return fmt.Errorf("listing %d shows %q, which nobody wrote", round, k)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func testExclusiveRace(t *testing.T, f Fixture) {
	ctx := ctxFor(t)
	if !storage.CanPutIfAbsent(f.Bucket) {
		// Such a bucket must say so when asked, never overwrite in silence.
		ep, ok := f.Bucket.(storage.ExclusivePutter)
		if !ok {
			return
		}
		err := ep.PutIfAbsent(ctx, "race/unsupported", bytes.NewReader([]byte("x")), nil)
		require.ErrorIs(t, err, storage.ErrUnsupported, "a bucket that cannot put exclusively answers ErrUnsupported")
		requireNotFound(t, f.Bucket, "race/unsupported")
		return
	}
	for round := range 3 {
		require.NoError(t, CheckExclusiveRace(ctx, f.Bucket, fmt.Sprintf("race/small-%d", round), 8, 64<<10))
	}
	// Large enough for the multipart path of every uploader in this module,
	// where S3 checks the condition only when the upload completes.
	require.NoError(t, CheckExclusiveRace(ctx, f.Bucket, "race/large", 4, 6*MiB))
	require.Len(t, list(t, f.Bucket, "race/"), 4, "one object per raced key, nothing else")
	requireNoIncompleteUploads(t, f)
}

func testListDuringWrites(t *testing.T, f Fixture) {
	stable := make([]string, 30)
	for i := range stable {
		stable[i] = fmt.Sprintf("busy/stable-%03d", i)
		put(t, f.Bucket, stable[i], []byte(stable[i]))
	}
	require.NoError(t, CheckListDuringWrites(ctxFor(t), f.Bucket, "busy/", stable, 20))
	require.Equal(t, stable, keys(list(t, f.Bucket, "busy/")), "the writers removed what they wrote")
}

func testConcurrentDeletes(t *testing.T, f Fixture) {
	ctx := ctxFor(t)
	put(t, f.Bucket, "gone/one", []byte("one"))
	put(t, f.Bucket, "gone/kept", []byte("kept"))
	errs := make([]error, 16)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			key := "gone/one"
			if i%2 == 1 {
				key = fmt.Sprintf("gone/never-%d", i)
			}
			errs[i] = f.Bucket.Delete(ctx, key)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...), "deleting a key, or a missing key, at the same time is not an error")
	requireNotFound(t, f.Bucket, "gone/one")
	require.Equal(t, []string{"gone/kept"}, keys(list(t, f.Bucket, "gone/")))
}
