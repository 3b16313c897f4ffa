package storage

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
)

// PutTokenKey is the user-metadata key under which a backend's PutIfAbsent
// stores a token unique to the call. When the store kept an object but its
// answer was lost (a connection reset after the request arrived), the
// client's retry of the same conditional request is refused because the key
// now exists. The token tells the writer's own object from another
// writer's: PutIfAbsent then reports success instead of ErrExist, so the
// writer never treats its own finished object as a stranger's. Backends
// leave the key out of Stat's Metadata.
// It is hyphenated like the library's other metadata keys: proxies such as
// nginx drop request headers whose names hold underscores by default, and
// S3 then refuses the signed request. Azure's identifier rule is met by the
// gocloud driver, which escapes the hyphens and unescapes them on reads.
const PutTokenKey = "etcdbackup-put-token"

// NewPutToken returns a random token for PutTokenKey.
func NewPutToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// WithPutToken returns a copy of md that also holds token under
// PutTokenKey.
func WithPutToken(md map[string]string, token string) map[string]string {
	out := make(map[string]string, len(md)+1)
	maps.Copy(out, md)
	out[PutTokenKey] = token
	return out
}

// WithoutPutToken returns md without PutTokenKey, and nil when nothing else
// is left. md itself is not changed.
func WithoutPutToken(md map[string]string) map[string]string {
	if _, ok := md[PutTokenKey]; !ok {
		return md
	}
	if len(md) == 1 {
		return nil
	}
	out := maps.Clone(md)
	delete(out, PutTokenKey)
	return out
}
