package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// state is what the controller keeps across restarts beside its config
// file: the destination each backup config was bound to when it was first
// accepted. A config written without a destination is bound to the
// default of that moment, and stays bound to it when the default changes
// later: its earlier backups live there. A controller-manager keeps the
// same in the status of its EtcdBackupConfig objects.
type state struct {
	path string

	mu       sync.Mutex
	Bindings map[string]string `json:"bindings"` // by job ID
}

// loadState reads the state file at path; a missing file is an empty
// state.
func loadState(path string) (*state, error) {
	s := &state{path: path, Bindings: map[string]string{}}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	if s.Bindings == nil {
		s.Bindings = map[string]string{}
	}
	return s, nil
}

// binding returns the destination the job was bound to, or "".
func (s *state) binding(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Bindings[id]
}

// bind records the job's destination and writes the file, atomically, if
// it changed. Removing a config forgets its binding (forget).
func (s *state) bind(id, dest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Bindings[id] == dest {
		return nil
	}
	s.Bindings[id] = dest
	return s.writeLocked()
}

func (s *state) forget(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.Bindings[id]; !ok {
		return nil
	}
	delete(s.Bindings, id)
	return s.writeLocked()
}

func (s *state) writeLocked() error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".state-*")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("state: %w", err)
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	// The rename is durable only once the directory that names the file
	// is synced.
	dir, err := os.Open(filepath.Dir(s.path))
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := errors.Join(dir.Sync(), dir.Close()); err != nil {
		return fmt.Errorf("state: sync directory: %w", err)
	}
	return nil
}

// oneShotDone reports whether the one-shot backup of cluster and name
// exists on the catalog already: a one-shot config runs once, restarts
// included.
func oneShotDone(ctx context.Context, c backup.Catalog, cluster, name string) (bool, error) {
	entries, err := backup.ListBackups(ctx, c, cluster)
	if err != nil {
		return false, err
	}
	id := backup.BackupID(cluster, name, time.Time{}, false)
	for _, e := range entries {
		if e.Kind != backup.KindBackup || e.Manifest.Name != name {
			continue
		}
		// "<cluster>-<name>", or with the run token of a destination
		// without exclusive create; a scheduled run has a timestamp.
		if rest, ok := strings.CutPrefix(e.ID, id); ok && (rest == "" || len(rest) == 1+backup.RunLen) {
			return true, nil
		}
	}
	return false, nil
}
