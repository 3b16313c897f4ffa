package blob

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/etcdbackup/etcdbackup/internal/faultpoint"
	"github.com/etcdbackup/etcdbackup/storage"
)

// PutThenStage implements storage.PairStager on a fileblob bucket that
// Open opened; other buckets, and a fileblob bucket with exclusive puts
// turned off, fail with storage.ErrUnsupported, as Stage does.
//
// Both objects are written under temporary keys first. Where the bucket's
// puts share syncs of their file system (see putFile), first is then
// linked into place, unsynced, and one round of syncfs(2) that began
// after that makes first's data, attributes and name durable together
// with second's temporary object: one wait for the disk where a Stage of
// both and a Publish of first take two. A crash before the round ends can
// leave first under its name with incomplete data, but second unnamed:
// the caller names second only once this returns (a backup's data object
// without its manifest is not a backup). When a round failed since the
// call began, the files and directories are synced one by one instead,
// as putFile does then. Elsewhere both temporary objects are synced at
// once, then first is published as Publish does.
//
// On an error nothing of either object is left (first's name is removed
// only while it still holds the file this call wrote), except when ctx
// ends during the round: first, named and complete, stays (another
// writer may have been refused for it), durable or not; second does not.
func (b *Bucket) PutThenStage(ctx context.Context, first, second storage.StagePut) (storage.Staged, error) {
	for _, p := range []storage.StagePut{first, second} {
		if err := b.checkKey("put", p.Key); err != nil {
			return nil, err
		}
	}
	if b.kind != driverFile || b.fileDir == "" || b.opts.NoExclusivePut {
		return nil, storage.Errorf("put", first.Key, storage.ErrUnsupported, errors.New("only a file bucket that Open opened stages objects"))
	}
	var mark uint64 // failed shared syncs before the first write
	if b.group != nil {
		mark = b.group.mark()
	}
	s1, data1, err := b.writeTemp(ctx, first.Key, first.Body, first.Options, true)
	if err != nil {
		return nil, err
	}
	s2, data2, err := b.writeTemp(ctx, second.Key, second.Body, second.Options, true)
	if err != nil {
		closeFiles(data1)
		s1.Discard(ctx)
		return nil, err
	}
	// The temporary files were made in their keys' directories: on those
	// directories' file systems.
	dirs := dirsUp(filepath.Dir(s1.final), filepath.Clean(b.fileDir))
	covered := dirs
	if d := filepath.Dir(s2.final); d != dirs[0] {
		covered = append([]string{d}, dirs...)
	}
	if g := b.group; g != nil && g.covers(covered...) {
		return b.linkThenShare(ctx, s1, data1, s2, data2, dirs, mark)
	}
	return b.stageEachThenPublish(ctx, s1, data1, s2, data2, mark)
}

// linkThenShare is PutThenStage where a shared round covers both objects
// and first's directories: first is linked, then one round makes it and
// second's temporary object durable.
func (b *Bucket) linkThenShare(ctx context.Context, s1 *fileStaged, data1 *os.File, s2 *fileStaged, data2 *os.File, dirs []string, mark uint64) (storage.Staged, error) {
	faultpoint.Hit("file-data-written")
	faultpoint.Hit("file-data-written")
	s1.done = true // named below, or its temporary object removed
	ours, err := s1.link(ctx)
	if err != nil {
		closeFiles(data1, data2)
		s2.Discard(ctx)
		return nil, err
	}
	undo := func() {
		b.unlinkOwn(s1.key, s1.final, ours)
		s2.Discard(ctx)
	}
	err = b.group.waitChecked(ctx, mark)
	if cerr := ctx.Err(); err != nil && cerr != nil {
		// first stays: its name may have been seen (another writer
		// refused with ErrExist), and it is complete; a round ends
		// when the disk answers, which a dead one never does.
		closeFiles(data1, data2)
		s2.Discard(ctx)
		return nil, storage.Errorf("put", s1.key, nil, cerr)
	}
	if err == nil {
		closeFiles(data1, data2) // the round reported their write-back errors
		for range 2 {
			faultpoint.Hit("file-data-synced")
			faultpoint.Hit("file-attrs-synced")
		}
		faultpoint.Hit("file-dir-synced")
		return s2, nil
	}
	// The error may be these objects', or another file's: sync them one
	// by one (first's attributes are at their name now).
	b.sharedSyncFailed(s1.final, err)
	err1 := b.syncTempEach(s1.final, data1)
	if err1 == nil {
		err1 = b.syncDirsEach(dirs)
	}
	err2 := b.syncTempEach(s2.tmp, data2)
	switch {
	case err1 != nil:
		undo()
		return nil, b.fileErrorf("put", s1.key, err1)
	case err2 != nil:
		undo()
		return nil, b.fileErrorf("put", s2.key, err2)
	}
	faultpoint.Hit("file-dir-synced")
	return s2, nil
}

// stageEachThenPublish is PutThenStage without a shared round over both:
// the two temporary objects are synced at once (their waits overlap),
// then first is published.
func (b *Bucket) stageEachThenPublish(ctx context.Context, s1 *fileStaged, data1 *os.File, s2 *fileStaged, data2 *os.File, mark uint64) (storage.Staged, error) {
	errc := make(chan error, 1)
	go func() { errc <- b.syncTemp(ctx, s2.tmp, data2, mark) }()
	err1 := b.syncTemp(ctx, s1.tmp, data1, mark)
	err2 := <-errc
	if err1 != nil || err2 != nil {
		s1.Discard(ctx)
		s2.Discard(ctx)
		if err1 != nil {
			return nil, b.fileErrorf("put", s1.key, err1)
		}
		return nil, b.fileErrorf("put", s2.key, err2)
	}
	if err := s1.Publish(ctx); err != nil {
		s2.Discard(ctx)
		return nil, err
	}
	return s2, nil
}

// closeFiles closes the descriptors writeTemp kept that are not nil.
func closeFiles(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}
