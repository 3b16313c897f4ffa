package s3

// SetMaxParts lowers the part limit of b, so that tests reach it with a
// few parts instead of 10,000.
func SetMaxParts(b *Bucket, n int) { b.maxParts = n }
