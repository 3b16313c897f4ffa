package blob

import (
	"context"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	gcblob "gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/etcdbackup/etcdbackup/storage"
)

// firstFilePage is the page size of the first try at reading a fileblob
// listing whole; each further try asks for four times as many.
var firstFilePage = 4096

// List implements storage.Bucket. It streams the driver's pages, checking
// that keys come in ascending byte order, unless Options.SortList is set or
// the bucket is a fileblob bucket: then it reads the listing whole and sorts
// it first.
func (b *Bucket) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		if err := storage.ValidatePrefix(prefix); err != nil {
			yield(storage.ObjectInfo{}, storage.Errorf("list", prefix, nil, err))
			return
		}
		if b.opts.SortList {
			b.listSorted(ctx, prefix, yield)
			return
		}
		b.listStream(ctx, prefix, yield)
	}
}

func (b *Bucket) listStream(ctx context.Context, prefix string, yield func(storage.ObjectInfo, error) bool) {
	it := b.b.List(&gcblob.ListOptions{Prefix: prefix})
	var prev string
	for first := true; ; first = false {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return
		}
		if err != nil {
			yield(storage.ObjectInfo{}, b.errorf("list", prefix, err, false))
			return
		}
		if obj.IsDir {
			continue
		}
		if !first && obj.Key <= prev {
			// Streaming cannot put it back in its place; say so rather
			// than break the contract quietly.
			err := fmt.Errorf("driver listed %q after %q, not in ascending byte order; set Options.SortList", obj.Key, prev)
			yield(storage.ObjectInfo{}, storage.Errorf("list", prefix, nil, err))
			return
		}
		prev = obj.Key
		if !yield(b.info(obj), nil) {
			return
		}
	}
}

func (b *Bucket) listSorted(ctx context.Context, prefix string, yield func(storage.ObjectInfo, error) bool) {
	var (
		objs []*gcblob.ListObject
		err  error
	)
	if b.kind == driverFile {
		objs, err = b.listFileWhole(ctx, prefix)
	} else {
		objs, err = b.listWhole(ctx, prefix)
	}
	if err != nil {
		yield(storage.ObjectInfo{}, b.errorf("list", prefix, err, false))
		return
	}
	slices.SortFunc(objs, func(x, y *gcblob.ListObject) int { return strings.Compare(x.Key, y.Key) })
	for i, obj := range objs {
		if obj.IsDir || (i > 0 && obj.Key == objs[i-1].Key) {
			continue
		}
		if b.kind == driverFile && isFileblobTemp(obj.Key) {
			continue
		}
		if !yield(b.info(obj), nil) {
			return
		}
	}
}

// listWhole reads every page of the listing.
func (b *Bucket) listWhole(ctx context.Context, prefix string) ([]*gcblob.ListObject, error) {
	it := b.b.List(&gcblob.ListOptions{Prefix: prefix})
	var objs []*gcblob.ListObject
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

// listFileWhole reads a fileblob listing in a single page. fileblob pages
// by walking the directory tree and skipping keys up to the last key of the
// previous page; since the walk does not visit keys in byte order ("a/b"
// before "a-b"), a key walked after the page boundary but sorting before it
// would be lost. One page, grown until it holds everything, cannot lose
// anything.
//
// fileblob reads a directory and then stats its entries one by one; a file
// renamed or removed in between (an upload moving its temporary file into
// place, a delete) fails the whole listing with NotFound. Such a listing is
// read again after a pause, up to fileListTries times in all.
func (b *Bucket) listFileWhole(ctx context.Context, prefix string) ([]*gcblob.ListObject, error) {
	for try := 1; ; try++ {
		objs, err := b.listFileOnce(ctx, prefix)
		if err == nil || gcerrors.Code(err) != gcerrors.NotFound || try == fileListTries {
			return objs, err
		}
		// A moment's pause lets a burst of renames pass.
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(try) * time.Millisecond):
		}
	}
}

// fileListTries bounds the readings of a file bucket's listing that raced
// a rename or a delete.
var fileListTries = 10

func (b *Bucket) listFileOnce(ctx context.Context, prefix string) ([]*gcblob.ListObject, error) {
	for size := firstFilePage; ; size *= 4 {
		objs, next, err := b.b.ListPage(ctx, gcblob.FirstPageToken, size, &gcblob.ListOptions{Prefix: prefix})
		if err != nil {
			return nil, err
		}
		if len(next) == 0 {
			return objs, nil
		}
	}
}

func (b *Bucket) info(obj *gcblob.ListObject) storage.ObjectInfo {
	info := storage.ObjectInfo{Key: obj.Key, Size: obj.Size, ModTime: obj.ModTime}
	if b.kind == driverS3 {
		var o types.Object
		if obj.As(&o) {
			info.ETag = aws.ToString(o.ETag)
		}
	}
	return info
}
