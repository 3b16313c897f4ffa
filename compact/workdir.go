package compact

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// workPrefix names the directories compactions work in: the replayed
// database, the drill's restore and the encoder's spool live there, and a
// compaction's is removed when it ends. A process killed meanwhile leaves
// its directory, as large as the cluster's database or more; the next
// compaction in the same temporary directory removes it (sweepStale).
const workPrefix = "etcdbackup-compact-"

// lockName is the file a running compaction holds locked in its work
// directory: a directory whose lock can be taken belongs to no running
// compaction, in this process or another.
const lockName = "running.lock"

// workDir is a compaction's directory, locked while it runs.
type workDir struct {
	path string
	lock *os.File
}

// newWorkDir makes and locks a work directory under dir (the system's
// temporary directory when empty).
func newWorkDir(dir string) (*workDir, error) {
	path, err := os.MkdirTemp(dir, workPrefix)
	if err != nil {
		return nil, fmt.Errorf("create compaction directory: %w", err)
	}
	// The lock file is made and locked under another name, then renamed:
	// a sweeper that finds lockName finds it locked, never a lock file
	// made but not yet locked.
	f, err := os.OpenFile(filepath.Join(path, lockName+".new"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err == nil {
		var ok bool
		ok, err = tryLock(f)
		if err == nil && !ok {
			err = errors.New("locked by another process")
		}
		if err == nil {
			err = os.Rename(filepath.Join(path, lockName+".new"), filepath.Join(path, lockName))
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		os.RemoveAll(path)
		return nil, fmt.Errorf("lock compaction directory: %w", err)
	}
	return &workDir{path: path, lock: f}, nil
}

// remove deletes the directory, then lets its lock go.
func (w *workDir) remove() error {
	err := os.RemoveAll(w.path)
	return errors.Join(err, w.lock.Close())
}

// sweepStale removes the work directories under dir that no running
// compaction holds: those a killed compaction left. A directory without a
// lock file is one being made, or not a compaction's: it stays.
func sweepStale(dir string, log *slog.Logger) {
	if !sweepable {
		return
	}
	if dir == "" {
		dir = os.TempDir()
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), workPrefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(filepath.Join(path, lockName), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		ok, err := tryLock(f)
		if err == nil && ok {
			err = os.RemoveAll(path)
			log.Info("removed the work directory of a compaction that did not end", "path", path, "error", err)
		}
		f.Close()
	}
}
