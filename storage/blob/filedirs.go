package blob

import "sync"

// maxDurableDirs bounds the directories a bucket remembers as durable; the
// record starts afresh when it is full (a put then syncs the directories
// above its key again, as the first put into them did).
const maxDurableDirs = 4096

// dirID names one directory for as long as it exists: its device, inode
// and birth time, so that a directory removed and made again under the
// same name, even with its inode number reused, is a different one.
type dirID struct {
	dev, ino uint64
	birth    int64 // nanoseconds since the epoch
}

// durableDirs records the directories whose name in their parent a put of
// this bucket has synced: once synced, a directory's entry stays durable
// for as long as that directory exists, so a later put into it need not
// sync the directories above it again. It is safe for concurrent use.
type durableDirs struct {
	mu   sync.Mutex
	dirs map[string]dirID
}

// has reports whether dir, as it is now, is a directory whose name a put
// synced.
func (d *durableDirs) has(dir string) bool {
	id, ok := identifyDir(dir)
	if !ok {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	got, found := d.dirs[dir]
	return found && got == id
}

// add records that dir's name in its parent was synced while dir was id.
func (d *durableDirs) add(dir string, id dirID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dirs == nil || len(d.dirs) >= maxDurableDirs {
		d.dirs = make(map[string]dirID)
	}
	d.dirs[dir] = id
}
