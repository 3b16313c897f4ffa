package blob

import "os"

// SetFirstFilePage sets the size of the first page of file listings until
// the returned function restores it.
func SetFirstFilePage(n int) (restore func()) {
	old := firstFilePage
	firstFilePage = n
	return func() { firstFilePage = old }
}

// KeepFailedUploads makes Put leave the multipart uploads of failed puts as
// the driver left them.
func KeepFailedUploads(b *Bucket) { b.keepFailedUploads = true }

// SetFileListTries sets how often a file listing that raced a rename or a
// delete is read until the returned function restores it.
func SetFileListTries(n int) (restore func()) {
	old := fileListTries
	fileListTries = n
	return func() { fileListTries = old }
}

// OnSync has b call fn with each file it syncs, before the sync; an error
// fn returns stands for the sync's.
func OnSync(b *Bucket, fn func(kind, path string) error) {
	if fn == nil {
		b.onSync = nil
		return
	}
	b.onSync = func(kind string, f *os.File) error { return fn(kind, f.Name()) }
}

// OnSyncFile is OnSync with the open file the sync is about to use.
func OnSyncFile(b *Bucket, fn func(kind string, f *os.File) error) { b.onSync = fn }

// OnRename has b call fn before each rename of its file commit; an error
// fn returns stands for the rename's.
func OnRename(b *Bucket, fn func(oldpath, newpath string) error) { b.onRename = fn }

// IdentifyDir reports whether the bucket can tell the directory dir names
// from another made at its place later (see durableDirs), and whether two
// calls name the same one.
func IdentifyDir(dir string) (id any, ok bool) { return identifyDir(dir) }

// SharesSyncs reports whether b's puts share syncs of its file system
// (groupSync).
func SharesSyncs(b *Bucket) bool { return b.group != nil }

// OnWriteback has b call fn with each write-back a put starts (see
// writebackWriter), before it starts; an error fn returns stands for the
// write-back's.
func OnWriteback(b *Bucket, fn func(off, n int64) error) { b.onWriteback = fn }

// WritebackChunk is writebackChunk.
const WritebackChunk = writebackChunk

// FlushesAfterSyncfs reports whether a round of b's shared syncs fsyncs
// the bucket's directory after syncfs (a file system without a journal).
func FlushesAfterSyncfs(b *Bucket) bool { return b.group != nil && b.group.flushAfter }
