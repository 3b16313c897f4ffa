package backuptest

import (
	"crypto/sha256"
	"math/rand/v2"
)

// Stream returns bytes shaped like an etcd snapshot stream: blocks whole
// 512-byte blocks with some structure (so that they compress a little),
// then their sha256 trailer. It is no bbolt database: enough for the trailer
// check, uploads and fetches, not for etcd's restore. The same arguments
// give the same bytes.
func Stream(blocks int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	body := make([]byte, blocks*512, blocks*512+sha256.Size)
	for i := range body {
		if i%4 == 0 {
			body[i] = byte(rng.Uint32())
		} else {
			body[i] = byte(i / 512)
		}
	}
	sum := sha256.Sum256(body)
	return append(body, sum[:]...)
}
