package blob

import "sync"

// maxDurableDirs bounds the directories a bucket remembers; the record
// starts afresh when it is full (a put then syncs every directory above
// its key again, as the first put into them did).
const maxDurableDirs = 4096

// dirID names one directory for as long as it exists: its device, inode
// number and the inode's generation, which the file system draws anew
// each time it allocates the inode, so that a directory removed and made
// again under the same name, even on a reused inode number, is another.
type dirID struct {
	dev, ino   uint64
	generation uint64 // as FS_IOC_GETVERSION answers it, in 8 bytes
}

// durableDirs records the directories whose names a put of this bucket
// synced, each with the identity it had: a directory's entry in its parent
// stays durable for as long as that directory exists there, so a later put
// below it need not sync the directories above it again. A walk records its
// directories only once it has synced all of them up to the bucket's
// directory: a put that fails, or one still syncing, makes none durable
// for the others. It is safe for concurrent use.
//
// The record cannot see a directory renamed away and back, which keeps its
// identity under a name its parent was not synced with: a bucket's
// directories must not be moved while a process has it open.
type durableDirs struct {
	mu   sync.Mutex
	dirs map[string]dirID
}

// durableFrom returns the index of the first of path (a directory, then
// each directory above it, the bucket's last) from which every directory
// is the one a completed walk recorded; len(path) when path[len(path)-1]
// is not. ids are the directories' identities now, ok whether each could
// be taken.
func (d *durableDirs) durableFrom(path []string, ids []dirID, ok []bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	from := len(path)
	for i := len(path) - 1; i >= 0; i-- {
		got, found := d.dirs[path[i]]
		if !ok[i] || !found || got != ids[i] {
			break
		}
		from = i
	}
	return from
}

// add records the directories of a walk that synced every name from
// path[0] up to the bucket's directory, with the identities they had
// before it began.
func (d *durableDirs) add(path []string, ids []dirID, ok []bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dirs == nil || len(d.dirs)+len(path) > maxDurableDirs {
		d.dirs = make(map[string]dirID)
	}
	for i, p := range path {
		if ok[i] {
			d.dirs[p] = ids[i]
		} else {
			delete(d.dirs, p)
		}
	}
}
