package backuptest

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

func TestStreamHasItsTrailer(t *testing.T) {
	s := Stream(3, 7)
	if len(s) != 3*512+sha256.Size {
		t.Fatalf("length %d", len(s))
	}
	sum := sha256.Sum256(s[:3*512])
	if !bytes.Equal(sum[:], s[3*512:]) {
		t.Fatal("trailer is not the sha256 of the body")
	}
	if !bytes.Equal(s, Stream(3, 7)) || bytes.Equal(s, Stream(3, 8)) {
		t.Fatal("streams are not deterministic per seed")
	}
}
