package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"
)

// The interfaces below are abilities some backends have and others lack.
// Callers test for them with a type assertion, or use the helper functions
// that fall back where a fallback is sound, as io/fs does for its optional
// interfaces. A wrapper that cannot provide an ability of its inner bucket
// returns an error matching ErrUnsupported.

// ExclusivePutter is implemented by buckets that can create an object only if
// no object exists under its key, atomically (S3's If-None-Match: *, GCS's
// ifGenerationMatch=0, Azure's If-None-Match: *, a no-replace link on a file
// system): of any number of writers racing on one new key, exactly one
// succeeds and its bytes are what the key holds afterwards.
type ExclusivePutter interface {
	// PutIfAbsent is Put that fails with ErrExist, writing nothing, when key
	// already exists. It fails with ErrUnsupported when the bucket cannot
	// create atomically after all (see ExclusiveChecker).
	PutIfAbsent(ctx context.Context, key string, r io.Reader, opts *PutOptions) error
}

// ExclusiveChecker is implemented by buckets whose ability to create
// atomically is only known at run time: a wrapper, whose answer is its
// inner bucket's, or an adapter whose driver or configuration cannot.
type ExclusiveChecker interface {
	// CanPutIfAbsent reports whether PutIfAbsent is atomic on this bucket.
	CanPutIfAbsent() bool
}

// CanPutIfAbsent reports whether b creates objects exclusively and
// atomically: b implements ExclusivePutter and, if it implements
// ExclusiveChecker, says so. Writers that must never share a key on a
// bucket without that ability make their keys unique instead.
func CanPutIfAbsent(b Bucket) bool {
	if _, ok := b.(ExclusivePutter); !ok {
		return false
	}
	if c, ok := b.(ExclusiveChecker); ok {
		return c.CanPutIfAbsent()
	}
	return true
}

// PutIfAbsent writes r to key only if key does not exist yet. It uses the
// bucket's ExclusivePutter when there is one. Otherwise it checks with Stat
// and then Puts, which is not atomic: two writers racing on the same new key
// may both succeed, the later one winning, so callers that race must use
// keys of their own on such buckets (see CanPutIfAbsent). The error matches
// ErrExist when key was taken.
func PutIfAbsent(ctx context.Context, b Bucket, key string, r io.Reader, opts *PutOptions) error {
	if ep, ok := b.(ExclusivePutter); ok {
		err := ep.PutIfAbsent(ctx, key, r, opts)
		if !errors.Is(err, ErrUnsupported) {
			return err
		}
	}
	_, err := b.Stat(ctx, key)
	switch {
	case err == nil:
		return Errorf("put", key, ErrExist, nil)
	case !errors.Is(err, ErrNotFound):
		return err
	}
	return b.Put(ctx, key, r, opts)
}

// Stager is implemented by buckets that can create an object exclusively
// in two halves: Stage writes its bytes to stable storage under no name,
// and Publish of what it returns gives them the key's name. A caller that
// stages several objects at once overlaps their waits for stable storage,
// and still names them in the order it chooses: on a file system, where
// each sync is a wait for the disk, two objects of which the second must
// not be visible before the first is durable cost three waits instead of
// six (see blob.Bucket.Stage). A wrapper that embeds a Stager and
// overrides PutIfAbsent inherits Stage, which bypasses it, unless it
// overrides Stage too.
type Stager interface {
	// Stage writes r as the object key is to name, durably, with nothing
	// visible under key. It fails with ErrExist when key exists already,
	// and with ErrUnsupported, writing nothing, when the bucket cannot
	// stage after all: the caller then puts the object as usual.
	Stage(ctx context.Context, key string, r io.Reader, opts *PutOptions) (Staged, error)
}

// Staged is an object a Stager wrote and has not named yet. Its owner
// calls Publish or Discard once.
type Staged interface {
	// Publish is PutIfAbsent's end: it names the object key unless key
	// exists (ErrExist), durably. When it returns nil the object is
	// visible and on stable storage; on an error nothing of it is left.
	Publish(ctx context.Context) error
	// Discard removes the staged object without naming it.
	Discard(ctx context.Context)
}

// PairStager is implemented by buckets that create an object and stage a
// second one, which must not be visible before the first is durable
// under its name (a backup's data object, then its manifest), in fewer
// waits for stable storage than a Stage of both and a Publish of the
// first: a file bucket whose puts share syncs of their file system names
// the first before either is synced, and makes both durable in one wait
// (see blob.Bucket.PutThenStage). It is found by a type assertion; a
// wrapper that embeds a PairStager and overrides Stage or PutIfAbsent
// inherits PutThenStage, which bypasses them, unless it overrides it too.
type PairStager interface {
	// PutThenStage creates first as PutIfAbsent does and stages second
	// as Stage does. When it returns nil, first is visible and on
	// stable storage, and second is durable under no name: its owner
	// publishes or discards it. An error is an *Error naming the key
	// it is of (ErrExist when that key exists already) and leaves
	// nothing of either object (first is removed only while its name
	// still holds what the call wrote), except that an end of ctx once
	// first is visible may leave first; ErrUnsupported, having written
	// nothing, says the bucket cannot after all: the caller then stages
	// or puts them as usual.
	PutThenStage(ctx context.Context, first, second StagePut) (Staged, error)
}

// StagePut is an object for PairStager: its key, body and options.
type StagePut struct {
	Key     string
	Body    io.Reader
	Options *PutOptions
}

// RetentionMode is an S3 object-lock retention mode.
type RetentionMode string

// The retention modes of S3 object lock.
const (
	// Governance: users with a special permission may still delete.
	Governance RetentionMode = "GOVERNANCE"
	// Compliance: nobody may delete the object before the date, not even
	// the account's root user.
	Compliance RetentionMode = "COMPLIANCE"
)

// Retention is the object-lock state of one object. The zero value means
// the object is not locked.
type Retention struct {
	Mode  RetentionMode
	Until time.Time
}

// Active reports whether the lock still forbids deletion at now.
func (r Retention) Active(now time.Time) bool {
	return r.Mode != "" && now.Before(r.Until)
}

// Validate checks that r names a known mode and a date.
func (r Retention) Validate() error {
	switch r.Mode {
	case Governance, Compliance:
	default:
		return fmt.Errorf("unknown retention mode %q", r.Mode)
	}
	if r.Until.IsZero() {
		return errors.New("retention has no retain-until date")
	}
	return nil
}

// Locker is implemented by buckets with object lock (WORM) enabled.
type Locker interface {
	// SetRetention locks key until r.Until. Shortening or removing a
	// compliance lock fails with ErrLocked.
	SetRetention(ctx context.Context, key string, r Retention) error
	// Retention returns key's lock; the zero Retention when it has none.
	Retention(ctx context.Context, key string) (Retention, error)
}

// LegalHolder is implemented by buckets whose objects can be under legal
// hold (S3 object lock). A legal hold has no end date: the store refuses to
// delete the object until someone lifts the hold, whatever its retention.
type LegalHolder interface {
	// LegalHold reports whether key's current version is under legal hold.
	LegalHold(ctx context.Context, key string) (bool, error)
}

// Upload is an unfinished multipart upload.
type Upload struct {
	Key       string
	ID        string
	Initiated time.Time
}

// UploadCleaner is implemented by buckets whose uploads can be left
// unfinished (S3 multipart uploads) when a writer dies before it could
// abort them. Retention uses it to collect stale uploads of its own keys.
type UploadCleaner interface {
	// IncompleteUploads yields the unfinished uploads under prefix.
	// Some S3-compatible stores only match an empty prefix or an exact key.
	IncompleteUploads(ctx context.Context, prefix string) iter.Seq2[Upload, error]
	// AbortUpload discards an unfinished upload and the parts it stored.
	AbortUpload(ctx context.Context, u Upload) error
}
