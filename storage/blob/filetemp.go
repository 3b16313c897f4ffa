package blob

import (
	"context"
	"errors"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"

	"github.com/etcdbackup/etcdbackup/storage"
)

// fileIncompleteUploads yields, as unfinished uploads, the temporary files
// of file commits under prefix: "<key>.<16 hex digits>.tmp", hidden from
// List, which a writer killed before it removed them leaves behind. After
// the link of an exclusive put such a file is a second name of the object,
// which keeps its space when the object is deleted. Each is yielded with
// the key it was written for, the temporary suffix as its ID and its
// modification time as its start, so that retention collects the stale
// ones as it collects S3 multipart uploads. Keys whose path fileblob
// escapes ("__0x") are not recognised.
func (b *Bucket) fileIncompleteUploads(ctx context.Context, prefix string) iter.Seq2[storage.Upload, error] {
	const op = "list uploads"
	return func(yield func(storage.Upload, error) bool) {
		if err := storage.ValidatePrefix(prefix); err != nil {
			yield(storage.Upload{}, storage.Errorf(op, prefix, nil, err))
			return
		}
		root := b.fileDir
		if full := b.filePrefix + prefix; !strings.Contains(full, "__0x") && strings.Contains(full, "/") {
			root = filepath.Join(root, filepath.FromSlash(full[:strings.LastIndexByte(full, '/')]))
		}
		var ups []storage.Upload
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if d.IsDir() || !isFileblobTemp(d.Name()) {
				return nil
			}
			rel, err := filepath.Rel(b.fileDir, p)
			if err != nil {
				return nil
			}
			rel = filepath.ToSlash(rel)
			id := rel[strings.LastIndexByte(rel[:len(rel)-len(tmpSuffix)], '.'):]
			key, ok := strings.CutPrefix(strings.TrimSuffix(rel, id), b.filePrefix)
			if !ok || !strings.HasPrefix(key, prefix) || strings.Contains(rel, "__0x") || storage.ValidateKey(key) != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil // removed meanwhile
			}
			ups = append(ups, storage.Upload{Key: key, ID: id, Initiated: info.ModTime()})
			return nil
		})
		if err != nil {
			yield(storage.Upload{}, b.fileErrorf(op, prefix, err))
			return
		}
		for _, u := range ups {
			if !yield(u, nil) {
				return
			}
		}
	}
}

// fileAbortUpload removes the temporary file u names and its attributes.
func (b *Bucket) fileAbortUpload(u storage.Upload) error {
	const op = "abort upload"
	if strings.ContainsAny(u.ID, `/\`) || !isFileblobTemp(u.Key+u.ID) || strings.Count(u.ID, ".") != 2 {
		return storage.Errorf(op, u.Key, nil, errors.New("not a temporary file of a put"))
	}
	tmp := b.filePath(u.Key) + u.ID
	err := errors.Join(os.Remove(tmp), os.Remove(tmp+attrsSuffix))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return b.fileErrorf(op, u.Key, err)
	}
	return nil
}
