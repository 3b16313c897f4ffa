package blob_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// lateCancel reports no error for its first n calls of Err, then
// Canceled: a cancellation that lands between two checks of a put.
type lateCancel struct {
	context.Context
	n, calls atomic.Int32
}

func (c *lateCancel) Err() error {
	if c.calls.Add(1) > c.n.Load() {
		return context.Canceled
	}
	return nil
}

// openUnder lists this process' descriptors open on files under dir (not
// on dir itself, which a bucket whose puts share syncs keeps open).
func openUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(l, dir+"/") {
			out = append(out, e.Name()+" -> "+l)
		}
	}
	return out
}

// TestFilePutLeavesNoDescriptor: a put whose context ends at each of its
// checks in turn leaves no descriptor of its files open once it returned
// (the second descriptor of a staged object's data included), with the
// collector off so that no finalizer closes one.
func TestFilePutLeavesNoDescriptor(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, how := range []string{"Put", "PutIfAbsent", "Stage", "shared Put", "shared PutIfAbsent", "shared Stage"} {
		for n := int32(0); n < 10; n++ {
			var b *blob.Bucket
			var dir string
			if strings.HasPrefix(how, "shared ") {
				b, dir = openShared(t, "")
			} else {
				dir = t.TempDir()
				b = openFile(t, dir, "")
			}
			ctx := &lateCancel{Context: context.Background()}
			ctx.n.Store(n)
			var err error
			switch strings.TrimPrefix(how, "shared ") {
			case "Put":
				err = b.Put(ctx, "k", strings.NewReader("data"), nil)
			case "PutIfAbsent":
				err = b.PutIfAbsent(ctx, "k", strings.NewReader("data"), nil)
			case "Stage":
				var s storage.Staged
				if s, err = b.Stage(ctx, "k", strings.NewReader("data"), nil); err == nil {
					s.Discard(context.Background())
				}
			}
			if fds := openUnder(t, dir); len(fds) > 0 {
				t.Errorf("%s, cancelled after %d checks (err %v): descriptors left open: %v", how, n, err, fds)
			}
		}
	}
}
