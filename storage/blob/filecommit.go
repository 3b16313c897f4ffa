package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/internal/faultpoint"
	"github.com/etcdbackup/etcdbackup/storage"
)

// putFile writes key on a fileblob bucket whose directory is known, so
// that the object is on stable storage, under its name, with its
// attributes, when putFile returns nil. fileblob itself syncs nothing, so
// the adapter writes the object under a temporary key beside it (its data
// and ".attrs" files, hidden from List) and commits it in this order:
//
//  1. once fileblob has renamed its own temporary file to the temporary
//     key, the data (through a second descriptor of fileblob's own, taken
//     before fileblob closed it: dupFile) and the ".attrs" file are
//     synced at once (a journaling file system commits both in one wait);
//     neither has the key's name yet;
//  2. for an exclusive put, the data gets its real name by link(2), which
//     fails with EEXIST when the name is taken, atomically across
//     processes on one file system, NFS included; only the writer whose
//     link succeeded then renames its attributes into place (a reader that
//     looks in between sees the object without its metadata). For a plain
//     put, the attributes are renamed into place first, then the data
//     (rename(2) both), so that new data is never paired with the old
//     version's attributes; a crash between the two renames leaves the old
//     data with the new attributes;
//  3. the key's directory and each one above it up to the bucket's are
//     synced, so that the names, and the folders fileblob created, survive
//     a crash of the host.
//
// Where the bucket's puts share syncs of its file system (groupSync: Linux
// 5.8 or later, a local file system, Options.SyncEachFile unset), each of
// steps 1 and 3 waits for one syncfs(2) of the file system that began
// after the step's writes instead, shared with the other puts waiting at
// that moment.
//
// A process that dies before step 2 strands its temporary files, which
// stay hidden. If the attributes cannot be renamed, putFile fails and, for
// an exclusive put, removes the object it linked. If a directory cannot be
// synced, an exclusive put removes the object it linked (only if the name
// still holds its file) and fails; a plain put fails and leaves the object,
// which has already replaced the key's previous version. On a file system
// that cannot sync a directory (some FUSE and network file systems answer
// EINVAL) no object can be made durable, and the error says so.
func (b *Bucket) putFile(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions, exclusive bool) error {
	s, err := b.stageFile(ctx, key, r, opts, exclusive)
	if err != nil {
		return err
	}
	return s.Publish(ctx)
}

// Stage implements storage.Stager on a fileblob bucket that Open opened:
// it is the first half of PutIfAbsent (see putFile), which writes and
// syncs the object under a temporary key hidden from List, and Publish is
// the second, which links it into place and syncs its directories. Other
// buckets, and a fileblob bucket with exclusive puts turned off, fail
// with storage.ErrUnsupported. A process that dies between the two halves
// strands the temporary object, hidden.
func (b *Bucket) Stage(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) (storage.Staged, error) {
	if err := b.checkKey("put", key); err != nil {
		return nil, err
	}
	if b.kind != driverFile || b.fileDir == "" || b.opts.NoExclusivePut {
		return nil, storage.Errorf("put", key, storage.ErrUnsupported, errors.New("only a file bucket that Open opened stages objects"))
	}
	s, err := b.stageFile(ctx, key, r, opts, true)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// fileStaged is an object putFile's first half wrote: its temporary
// object (data and attributes) synced, under no name yet.
type fileStaged struct {
	b          *Bucket
	key        string // the object's key
	tmpKey     string // the temporary object's key
	final, tmp string // their data files' paths
	exclusive  bool
	done       bool // published, or its temporary object removed
}

// stageFile is putFile's first half, step 1: it writes r under a
// temporary key beside key and syncs it.
func (b *Bucket) stageFile(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions, exclusive bool) (*fileStaged, error) {
	var mark uint64 // failed shared syncs before the first write
	if b.group != nil {
		mark = b.group.mark()
	}
	s, data, err := b.writeTemp(ctx, key, r, opts, exclusive)
	if err != nil {
		return nil, err
	}
	if err := b.syncTemp(ctx, s.tmp, data, mark); err != nil {
		s.removeTemp(ctx)
		return nil, b.fileErrorf("put", key, err)
	}
	return s, nil
}

// writeTemp writes r under a temporary key beside key, unsynced, and
// returns it with a second descriptor of its data file for syncTemp (nil
// when putChecked synced the data already). An exclusive put fails first
// with storage.ErrExist when key's name is taken.
func (b *Bucket) writeTemp(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions, exclusive bool) (*fileStaged, *os.File, error) {
	const op = "put"
	final := b.filePath(key)
	if exclusive {
		// A name taken now fails the link in Publish: fail before writing.
		if _, err := os.Lstat(final); err == nil {
			return nil, nil, storage.Errorf(op, key, storage.ErrExist, nil)
		}
	}
	suffix, err := tempSuffix()
	if err != nil {
		return nil, nil, storage.Errorf(op, key, nil, err)
	}
	s := &fileStaged{b: b, key: key, tmpKey: key + suffix, final: final, tmp: final + suffix, exclusive: exclusive}
	var data *os.File
	if err := b.putChecked(ctx, s.tmpKey, r, opts, false, &data); err != nil {
		return nil, nil, relabel(err, s.tmpKey, key)
	}
	return s, data, nil
}

// Publish implements storage.Staged: putFile's second half, steps 2 and
// 3. It gives the staged object its key's name and syncs the directories
// that hold it; on an error nothing is left of the staged object (a plain
// put whose directories could not be synced leaves the object, see
// putFile). A staged object is published once.
func (s *fileStaged) Publish(ctx context.Context) error {
	const op = "put"
	if s.done {
		return storage.Errorf(op, s.key, nil, errors.New("the staged object was published or discarded already"))
	}
	s.done = true
	b := s.b
	var mark uint64 // failed shared syncs before the names change
	if b.group != nil {
		mark = b.group.mark()
	}
	ours, err := s.link(ctx)
	if err != nil {
		return err
	}
	if err := b.syncDirs(filepath.Dir(s.final), mark); err != nil {
		if s.exclusive {
			b.unlinkOwn(s.key, s.final, ours)
		}
		return b.fileErrorf(op, s.key, err)
	}
	faultpoint.Hit("file-dir-synced")
	return nil
}

// link is Publish up to its directories' sync: it gives the staged object
// its name (for an exclusive put, its data then its attributes, and drops
// the temporary link) and returns what the name holds, for unlinkOwn. On
// an error nothing of the object is left.
func (s *fileStaged) link(ctx context.Context) (os.FileInfo, error) {
	const op = "put"
	b, key, final, tmp := s.b, s.key, s.final, s.tmp
	ours, err := os.Stat(tmp)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = b.name(tmp, final, s.exclusive)
	}
	if err != nil {
		s.removeTemp(ctx)
		if s.exclusive && errors.Is(err, fs.ErrExist) {
			return nil, storage.Errorf(op, key, storage.ErrExist, nil)
		}
		return nil, b.fileErrorf(op, key, err)
	}
	faultpoint.Hit("file-linked")
	if s.exclusive {
		if err := b.rename(tmp+attrsSuffix, final+attrsSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.unlinkOwn(key, final, ours)
			s.removeTemp(ctx)
			return nil, b.fileErrorf(op, key, fmt.Errorf("rename attributes into place: %w", err))
		}
		faultpoint.Hit("file-attrs-renamed")
		if err := os.Remove(tmp); err != nil && b.opts.Logger != nil {
			b.opts.Logger.Warn("temporary link of an exclusive put left behind", "key", s.tmpKey, "error", err)
		}
	}
	return ours, nil
}

// Discard implements storage.Staged: it removes the temporary object of
// a staged object not published.
func (s *fileStaged) Discard(ctx context.Context) {
	if s.done {
		return
	}
	s.done = true
	s.removeTemp(ctx)
}

// removeTemp removes the temporary object, on a context of its own
// bounded by Options.CleanupTimeout.
func (s *fileStaged) removeTemp(ctx context.Context) {
	b := s.b
	cctx, cancel := cleanup.Context(ctx, b.opts.CleanupTimeout)
	defer cancel()
	if err := b.b.Delete(cctx, s.tmpKey); err != nil && b.opts.Logger != nil {
		b.opts.Logger.Warn("temporary file of a put left behind", "key", s.tmpKey, "error", err)
	}
}

// syncTemp syncs the temporary object at tmp: its data through data, a
// second descriptor of fileblob's own (nil when putChecked synced the data
// already), which it closes, and its ".attrs" file (absent on a bucket
// opened with metadata=skip). A round of the bucket's groupSync syncs both
// where it covers tmp (mark is groupSync.mark's count from before the
// object was written). Otherwise, or when a round failed since mark (whose
// error may be this object's, or another file's), both are synced one by
// one, at once: the two waits for stable storage overlap, and a journaling
// file system commits both in one; an error of those is the object's own.
func (b *Bucket) syncTemp(ctx context.Context, tmp string, data *os.File, mark uint64) error {
	if data != nil {
		faultpoint.Hit("file-data-written")
	}
	if g := b.group; g != nil && g.covers(tmp) {
		err := g.waitChecked(ctx, mark)
		if err == nil {
			if data != nil {
				_ = data.Close() // the round reported its write-back errors
				faultpoint.Hit("file-data-synced")
			}
			faultpoint.Hit("file-attrs-synced")
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			if data != nil {
				_ = data.Close()
			}
			return cerr
		}
		b.sharedSyncFailed(tmp, err)
	}
	return b.syncTempEach(tmp, data)
}

// syncTempEach is syncTemp without a shared sync: it syncs the data
// (through data, which it closes, unless nil) and the ".attrs" file of
// the object at tmp, at once.
func (b *Bucket) syncTempEach(tmp string, data *os.File) error {
	attrs := make(chan error, 1)
	go func() { attrs <- b.syncPath(tmp+attrsSuffix, "attrs") }()
	var derr error
	if data != nil {
		derr = errors.Join(b.syncFile(data, "data"), data.Close())
	}
	aerr := <-attrs
	if derr != nil {
		return fmt.Errorf("sync data: %w", derr)
	}
	if data != nil {
		faultpoint.Hit("file-data-synced")
	}
	if aerr != nil && !errors.Is(aerr, fs.ErrNotExist) {
		return fmt.Errorf("sync attributes: %w", aerr)
	}
	faultpoint.Hit("file-attrs-synced")
	return nil
}

// sharedSyncFailed logs that a shared sync failed since a put at path
// began (err), before the put syncs its own files one by one.
func (b *Bucket) sharedSyncFailed(path string, err error) {
	if b.opts.Logger != nil {
		b.opts.Logger.Warn("a shared sync of the file system failed; syncing the put's own files one by one", "path", path, "error", err)
	}
}

// name gives the temporary file tmp the name final: a link that fails if
// final exists for an exclusive put; otherwise a rename of its attributes,
// then of its data, each replacing the key's previous one.
func (b *Bucket) name(tmp, final string, exclusive bool) error {
	if exclusive {
		if err := os.Link(tmp, final); err != nil {
			return fmt.Errorf("link into place: %w", err)
		}
		return nil
	}
	if err := b.rename(tmp+attrsSuffix, final+attrsSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rename attributes into place: %w", err)
	}
	faultpoint.Hit("file-attrs-renamed")
	if err := b.rename(tmp, final); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	return nil
}

// rename is os.Rename through the test hook when one is set.
func (b *Bucket) rename(oldpath, newpath string) error {
	if b.onRename != nil {
		if err := b.onRename(oldpath, newpath); err != nil {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
		}
	}
	return os.Rename(oldpath, newpath)
}

// unlinkOwn removes the object at final and its attributes after a put
// that could not make it durable, if final still names the file ours
// describes: another writer's object under the same key is left alone.
// The attributes go first: while the name still holds ours, no exclusive
// writer can link its own object and rename its attributes into place.
// The removal is not synced either, so a crash can bring the object back:
// a complete object, like any other, except on PutThenStage's path, where
// the object was named before it was synced and may then come back
// incomplete (a data object whose manifest was never named).
func (b *Bucket) unlinkOwn(key, final string, ours os.FileInfo) {
	fi, err := os.Stat(final)
	if err != nil || !os.SameFile(fi, ours) {
		return
	}
	if err := errors.Join(os.Remove(final+attrsSuffix), os.Remove(final)); err != nil && !errors.Is(err, fs.ErrNotExist) && b.opts.Logger != nil {
		b.opts.Logger.Warn("object of a failed put left behind", "key", key, "error", err)
	}
}

// fileErrorf is errorf for the errors of the adapter's own file-system
// calls, which it classifies as fileblob's.
func (b *Bucket) fileErrorf(op, key string, err error) error {
	sentinel, err := fileError(op, err)
	return storage.Errorf(op, key, sentinel, err)
}

// syncDirs syncs dir, which holds the object's new name, and each
// directory above it up to the bucket's directory, which hold the names of
// the folders fileblob creates. It stops at a directory from which every
// directory up to the bucket's is one that a completed walk synced and
// still the same (see durableDirs): their names are durable. Windows
// cannot open a directory to sync it; NTFS journals its names. Where the
// bucket's groupSync covers every one of those directories, a round of it
// syncs them all (mark is groupSync.mark's count from before the names
// changed); when a round failed since mark, they are synced one by one as
// elsewhere. The wait is not cut short by a context, as an fsync is not:
// the names may have been seen already, and a put that fails after them
// removes what it linked. It can take two rounds, and a round waits for
// everything being written to the file system.
func (b *Bucket) syncDirs(dir string, mark uint64) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	path := dirsUp(dir, filepath.Clean(b.fileDir))
	if g := b.group; g != nil && g.covers(path...) {
		err := g.waitChecked(context.Background(), mark)
		if err == nil {
			return nil
		}
		// The error may be these directories', or another file's: sync
		// them one by one.
		b.sharedSyncFailed(dir, err)
	}
	return b.syncDirsEach(path)
}

// syncDirsEach is syncDirs without a shared sync: it syncs the
// directories of path (dirsUp's) one by one.
func (b *Bucket) syncDirsEach(path []string) error {
	ids, ok := make([]dirID, len(path)), make([]bool, len(path))
	for i, d := range path {
		// Taken before any sync: a directory made again meanwhile is
		// another, and recorded as none.
		ids[i], ok[i] = identifyDir(d)
	}
	// path[from:] are durable: sync the names from dir's up to the one
	// path[from] holds.
	from := b.durable.durableFrom(path, ids, ok)
	for _, d := range path[:min(from+1, len(path))] {
		if err := b.syncPath(d, "dir"); err != nil {
			if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP) {
				return fmt.Errorf("sync directory %s: the file system cannot sync a directory, so no object can be made durable on it: %w", d, err)
			}
			return fmt.Errorf("sync directory %s: %w", d, err)
		}
	}
	b.durable.add(path, ids, ok)
	return nil
}

// dirsUp returns dir and each directory above it up to top (the last), or
// dir alone when it is not under top.
func dirsUp(dir, top string) []string {
	path := []string{dir}
	for dir != top {
		parent := filepath.Dir(dir)
		if parent == dir || !isUnder(parent, top) {
			break
		}
		path = append(path, parent)
		dir = parent
	}
	return path
}

// isUnder reports whether dir is top or inside it.
func isUnder(dir, top string) bool {
	rel, err := filepath.Rel(top, dir)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && !startsWithDotDot(rel)
}

func startsWithDotDot(rel string) bool {
	return len(rel) >= 3 && rel[:2] == ".." && os.IsPathSeparator(rel[2])
}

// syncPath opens path and syncs it. A file is opened for writing, as
// Windows requires to flush it (FlushFileBuffers); a directory is opened
// read-only, as it can only be.
func (b *Bucket) syncPath(path, kind string) error {
	var f *os.File
	var err error
	if kind == "dir" {
		f, err = os.Open(path)
	} else {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return err
	}
	return errors.Join(b.syncFile(f, kind), f.Close())
}

// syncFile syncs f, a file of the given kind ("data", "attrs" or "dir"),
// through the test hook when one is set.
func (b *Bucket) syncFile(f *os.File, kind string) error {
	if b.onSync != nil {
		if err := b.onSync(kind, f); err != nil {
			return &fs.PathError{Op: "sync", Path: f.Name(), Err: err}
		}
	}
	return f.Sync()
}
