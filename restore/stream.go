package restore

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	"filippo.io/age"

	"github.com/etcdbackup/etcdbackup/backup"
)

// DecodeStream reads stored bytes that come without a manifest, from a
// pipe or a socket: it tells age encryption, zstd and gzip by their first
// bytes, decrypts with identities and decompresses. What it returns is
// the plaintext a Snapshotter or KeysExporter produced; a snapshot's etcd
// trailer, or a keys-json object's lines, are the only checks left, since
// no manifest records a digest. An encrypted stream without an identity
// that opens it fails with an error matching ErrDecrypt.
func DecodeStream(r io.Reader, identities []age.Identity) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(len(ageMagic))
	if !bytes.Equal(head, []byte(ageMagic)) {
		return backup.NewDecoder(br, sniffCompression(br))
	}
	if len(identities) == 0 {
		return nil, fmt.Errorf("%w: the stream is encrypted and no identity was given", ErrDecrypt)
	}
	// Decrypt first, then look at the plaintext's own first bytes.
	plain, err := backup.NewDecoder(br, backup.None, identities...)
	if err != nil {
		return nil, err
	}
	pr := bufio.NewReaderSize(plain, 64<<10)
	dec, err := backup.NewDecoder(pr, sniffCompression(pr))
	if err != nil {
		plain.Close()
		return nil, err
	}
	return &multiCloser{ReadCloser: dec, others: []io.Closer{plain}}, nil
}
