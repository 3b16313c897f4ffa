package s3

import (
	"context"
	"errors"
	"iter"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/etcdbackup/etcdbackup/storage"
)

// SetRetention implements storage.Locker with PutObjectRetention on the
// key's current version. The bucket must have been created with object
// lock; otherwise the error matches storage.ErrUnsupported. Shortening a
// compliance lock, or turning it into governance, fails with
// storage.ErrLocked.
func (b *Bucket) SetRetention(ctx context.Context, key string, r storage.Retention) error {
	if err := storage.ValidateKey(key); err != nil {
		return storage.Errorf("set retention", key, nil, err)
	}
	if err := r.Validate(); err != nil {
		return storage.Errorf("set retention", key, nil, err)
	}
	mode := minio.RetentionMode(r.Mode)
	until := r.Until.UTC()
	err := b.core.PutObjectRetention(ctx, b.name, key, minio.PutObjectRetentionOptions{
		Mode:            &mode,
		RetainUntilDate: &until,
	})
	return translate("set retention", key, err)
}

// Retention implements storage.Locker with GetObjectRetention on the key's
// current version: the zero Retention when the version has no lock. On a
// bucket without object lock the error matches storage.ErrUnsupported.
func (b *Bucket) Retention(ctx context.Context, key string) (storage.Retention, error) {
	if err := storage.ValidateKey(key); err != nil {
		return storage.Retention{}, storage.Errorf("retention", key, nil, err)
	}
	mode, until, err := b.core.GetObjectRetention(ctx, b.name, key, "")
	switch {
	case errCode(err) == "NoSuchObjectLockConfiguration":
		return storage.Retention{}, nil
	case err != nil:
		return storage.Retention{}, translate("retention", key, err)
	}
	var r storage.Retention
	if mode != nil {
		r.Mode = storage.RetentionMode(*mode)
	}
	if until != nil {
		r.Until = *until
	}
	return r, nil
}

// LegalHold implements storage.LegalHolder with GetObjectLegalHold on the
// key's current version. On a bucket without object lock the error matches
// storage.ErrUnsupported.
func (b *Bucket) LegalHold(ctx context.Context, key string) (bool, error) {
	if err := storage.ValidateKey(key); err != nil {
		return false, storage.Errorf("legal hold", key, nil, err)
	}
	status, err := b.core.GetObjectLegalHold(ctx, b.name, key, minio.GetObjectLegalHoldOptions{})
	switch {
	case errCode(err) == "NoSuchObjectLockConfiguration":
		return false, nil // Amazon S3: no hold was ever set
	case err != nil:
		return false, translate("legal hold", key, err)
	}
	return status != nil && *status == minio.LegalHoldEnabled, nil
}

// IncompleteUploads implements storage.UploadCleaner.
//
// Some stores (MinIO among them) match a ListMultipartUploads prefix only
// when it is empty or a whole key, so this lists every upload of the
// bucket, page after page, and keeps those under prefix.
func (b *Bucket) IncompleteUploads(ctx context.Context, prefix string) iter.Seq2[storage.Upload, error] {
	return func(yield func(storage.Upload, error) bool) {
		if err := storage.ValidatePrefix(prefix); err != nil {
			yield(storage.Upload{}, storage.Errorf("list uploads", prefix, nil, err))
			return
		}
		var keyMarker, idMarker string
		for {
			res, err := b.core.ListMultipartUploads(ctx, b.name, "", keyMarker, idMarker, "", 1000)
			if err != nil {
				yield(storage.Upload{}, translate("list uploads", prefix, err))
				return
			}
			for _, mu := range res.Uploads {
				if !strings.HasPrefix(mu.Key, prefix) {
					continue
				}
				if !yield(storage.Upload{Key: mu.Key, ID: mu.UploadID, Initiated: mu.Initiated}, nil) {
					return
				}
			}
			if !res.IsTruncated {
				return
			}
			if res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker {
				yield(storage.Upload{}, storage.Errorf("list uploads", prefix, nil,
					errors.New("store returned a truncated page without advancing")))
				return
			}
			keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
		}
	}
}

// AbortUpload implements storage.UploadCleaner. Aborting an upload that is
// already gone is not an error, as deleting a missing key is not.
func (b *Bucket) AbortUpload(ctx context.Context, u storage.Upload) error {
	if err := storage.ValidateKey(u.Key); err != nil {
		return storage.Errorf("abort upload", u.Key, nil, err)
	}
	if u.ID == "" {
		return storage.Errorf("abort upload", u.Key, nil, errors.New("empty upload id"))
	}
	err := b.core.AbortMultipartUpload(ctx, b.name, u.Key, u.ID)
	if errCode(err) == "NoSuchUpload" {
		return nil
	}
	return translate("abort upload", u.Key, err)
}
