package restore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// etcd's storage packages trust their database: a key of the "key" bucket
// that is not a revision panics, and a value that is not a KeyValue calls
// zap's Fatal, which exits the process. Both happen on a goroutine of
// etcd's own while it builds its index, where no recover can reach. A
// snapshot whose trailer matches can still hold such a database (a
// snapshot of something else, or one crafted), so every path that hands a
// file to etcd checks it with bbolt first, on the caller's goroutine.

// Revision keys of etcd's "key" bucket: 8 bytes of main revision, '_', 8
// bytes of sub revision, and an optional tombstone mark.
const (
	revisionKeyLen       = 17
	markedRevisionKeyLen = 18
)

// checkDatabase reads the bbolt database at path and checks what etcd's
// storage would panic or exit on: every bucket's pages, the keys and
// values of the "key" bucket (revisions in ascending order, KeyValues),
// the revisions and indexes of "meta", the leases of "lease", and the free
// list, which etcd's backend allocates from when it commits. A file
// that fails fails with ErrIntegrity. Faults of the memory-mapped file are
// turned into errors too.
func checkDatabase(ctx context.Context, path string) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: database %s cannot be read: %v", ErrIntegrity, path, p)
		}
	}()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("%w: %s is not an etcd database: %w", ErrIntegrity, path, err)
	}
	defer db.Close()
	var txid uint64
	err = db.View(func(tx *bolt.Tx) error {
		txid = uint64(tx.ID())
		if err := walkBuckets(ctx, tx); err != nil {
			return err
		}
		if err := checkKeyBucket(ctx, tx.Bucket([]byte("key"))); err != nil {
			return err
		}
		if err := checkMetaBucket(tx.Bucket([]byte("meta"))); err != nil {
			return err
		}
		return checkLeaseBucket(tx.Bucket([]byte("lease")))
	})
	if err == nil {
		err = checkFreelist(ctx, path, txid)
	}
	if err != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w: database %s: %w", ErrIntegrity, path, err)
	}
	return err
}

// walkBuckets reads every page of every bucket once, so that a broken
// page faults here rather than in etcd.
func walkBuckets(ctx context.Context, tx *bolt.Tx) error {
	return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		n := 0
		return b.ForEach(func(k, v []byte) error {
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if v == nil && b.Bucket(k) != nil {
				return fmt.Errorf("bucket %q holds a nested bucket %q, which etcd never writes", name, k)
			}
			return nil
		})
	})
}

// checkKeyBucket checks that every key of etcd's "key" bucket is a
// revision, each after the one before, and every value a KeyValue.
func checkKeyBucket(ctx context.Context, b *bolt.Bucket) error {
	if b == nil {
		return nil
	}
	var last []byte
	n := 0
	return b.ForEach(func(k, v []byte) error {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := checkRevisionKey(k); err != nil {
			return fmt.Errorf("bucket \"key\": %w", err)
		}
		if last != nil && bytes.Compare(k[:revisionKeyLen], last) <= 0 {
			return fmt.Errorf("bucket \"key\": revision %x is not after %x", k[:revisionKeyLen], last)
		}
		last = append(last[:0], k[:revisionKeyLen]...)
		if err := checkKeyValue(v); err != nil {
			return fmt.Errorf("bucket \"key\": revision %x: %w", k, err)
		}
		return nil
	})
}

// errEmptyKey is checkKeyValue's error for a KeyValue without a key.
var errEmptyKey = errors.New("empty key")

// checkKeyValue checks v as proto.Unmarshal into an mvccpb.KeyValue
// would decode it, without copying it (decoding copies the key and the
// value, which is the whole database again in garbage): every tag is a
// valid field number, every field's value is whole, no group ends that
// did not start, and the key (field 1, its last occurrence as a bytes
// field, as proto3 keeps) is not empty. A known field of another wire
// type is an unknown field to proto.Unmarshal, and so here.
func checkKeyValue(v []byte) error {
	var key []byte
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return fmt.Errorf("value is no KeyValue: %w", protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("value is no KeyValue: field number %d out of range", num)
		}
		if typ == protowire.EndGroupType {
			return fmt.Errorf("value is no KeyValue: field %d ends a group that did not start", num)
		}
		v = v[n:]
		if num == keyValueKeyField && typ == protowire.BytesType {
			b, n := protowire.ConsumeBytes(v)
			if n < 0 {
				return fmt.Errorf("value is no KeyValue: key: %w", protowire.ParseError(n))
			}
			key, v = b, v[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, v)
		if n < 0 {
			return fmt.Errorf("value is no KeyValue: field %d: %w", num, protowire.ParseError(n))
		}
		v = v[n:]
	}
	if len(key) == 0 {
		return errEmptyKey
	}
	return nil
}

// keyValueKeyField is the field number of mvccpb.KeyValue's key.
const keyValueKeyField = 1

// checkRevisionKey checks k as mvcc.BytesToBucketKey would, which panics.
func checkRevisionKey(k []byte) error {
	if len(k) != revisionKeyLen && len(k) != markedRevisionKeyLen {
		return fmt.Errorf("key %x is not a revision: %d bytes", k, len(k))
	}
	if k[8] != '_' {
		return fmt.Errorf("key %x is not a revision: no separator", k)
	}
	if int64(binary.BigEndian.Uint64(k[:8])) < 0 || int64(binary.BigEndian.Uint64(k[9:17])) < 0 {
		return fmt.Errorf("key %x is a negative revision", k)
	}
	return nil
}

// checkMetaBucket checks the values etcd decodes without checking them.
func checkMetaBucket(b *bolt.Bucket) error {
	if b == nil {
		return nil
	}
	for _, name := range []string{"finishedCompactRev", "scheduledCompactRev"} {
		if v := b.Get([]byte(name)); v != nil {
			if err := checkRevisionKey(v); err != nil {
				return fmt.Errorf("bucket \"meta\": %s: %w", name, err)
			}
		}
	}
	for _, name := range []string{"consistent_index", "term"} {
		if v := b.Get([]byte(name)); v != nil && len(v) != 8 {
			return fmt.Errorf("bucket \"meta\": %s is %d bytes, not 8", name, len(v))
		}
	}
	return nil
}

// checkLeaseBucket checks every lease etcd's lessor would decode.
func checkLeaseBucket(b *bolt.Bucket) error {
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("bucket \"lease\": key %x is not a lease ID", k)
		}
		var l leasepb.Lease
		if err := proto.Unmarshal(v, &l); err != nil {
			return fmt.Errorf("bucket \"lease\": lease %x: %w", k, err)
		}
		return nil
	})
}
