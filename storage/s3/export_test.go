package s3

// SetMaxParts lowers the part limit of b, so that tests reach it with a
// few parts instead of 10,000.
func SetMaxParts(b *Bucket, n int) { b.maxParts = n }

// OnPartBufferMap calls f with the bytes of part buffers one Put holds
// after each buffer it maps.
func OnPartBufferMap(b *Bucket, f func(held int64)) { b.onMap = f }
