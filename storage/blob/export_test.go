package blob

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
func OnSync(b *Bucket, fn func(kind, path string) error) { b.onSync = fn }
