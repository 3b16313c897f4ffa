package retention_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// lockedStore is a store of generated objects with the modification times
// the generator chose and object locks on some of them: a fake of one
// function, the listing the executor acts on.
type lockedStore struct {
	mu      sync.Mutex
	objects map[string][]byte
	mods    map[string]time.Time
	locked  map[string]bool
}

var _ storage.Locker = (*lockedStore)(nil)

func (s *lockedStore) List(_ context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		s.mu.Lock()
		var infos []storage.ObjectInfo
		for k, b := range s.objects {
			if strings.HasPrefix(k, prefix) {
				infos = append(infos, storage.ObjectInfo{Key: k, Size: int64(len(b)), ModTime: s.mods[k]})
			}
		}
		s.mu.Unlock()
		slices.SortFunc(infos, func(a, b storage.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
		for _, info := range infos {
			if !yield(info, nil) {
				return
			}
		}
	}
}

func (s *lockedStore) Get(_ context.Context, key string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects[key]
	if !ok {
		return nil, storage.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (s *lockedStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locked[key] {
		return storage.ErrLocked
	}
	delete(s.objects, key)
	return nil
}

func (s *lockedStore) SetRetention(context.Context, string, storage.Retention) error {
	return storage.ErrUnsupported
}

func (s *lockedStore) Retention(_ context.Context, key string) (storage.Retention, error) {
	if s.locked[key] {
		return storage.Retention{Mode: storage.Compliance, Until: time.Now().AddDate(1, 0, 0)}, nil
	}
	return storage.Retention{}, nil
}

// storeOf writes a generated history as objects: valid manifests and
// their data, an unreadable manifest and its data, legacy and foreign
// objects; a few of them locked.
func storeOf(t *testing.T, h *propHistory, rng *rand.Rand) *lockedStore {
	t.Helper()
	s := &lockedStore{objects: map[string][]byte{}, mods: map[string]time.Time{}, locked: map[string]bool{}}
	put := func(key string, b []byte) {
		s.objects[key] = b
		s.mods[key] = h.mods[key]
		if rng.IntN(15) == 0 {
			s.locked[key] = true
		}
	}
	for _, e := range h.entries {
		switch {
		case e.Manifest != nil:
			m := *e.Manifest
			m.Format, m.Compression, m.DataKey = backup.ManifestFormat, backup.Zstd, strings.TrimPrefix(e.Key, e.Cluster+"/")
			if m.IsDelta() {
				m.Format = backup.DeltaManifestFormat
			}
			m.Raw = backup.Digest{Size: 1, SHA256: strings.Repeat("ab", 32)}
			m.Stored = m.Raw
			raw, err := json.Marshal(&m)
			require.NoError(t, err)
			put(e.ManifestKey, raw)
			put(e.Key, []byte("x"))
		case e.Kind == backup.KindInvalid:
			put(e.Key, []byte(`{"format": 99}`))
		default:
			put(e.Key, []byte("x"))
		}
	}
	return s
}

// TestPrunePropertiesOnStore prunes generated folders through Pruner, on a
// store with object locks: besides the invariants of TestPruneProperties,
// no locked object and nothing outside the cluster's folder is deleted,
// and every entry is listed as the generator wrote it.
func TestPrunePropertiesOnStore(t *testing.T) {
	for round := range 60 {
		rng := rand.New(rand.NewPCG(uint64(round), 3535))
		h := genHistory(rng)
		s := storeOf(t, h, rng)
		before := map[string][]byte{}
		for k, v := range s.objects {
			before[k] = v
		}
		listed, err := backup.ListBackups(t.Context(), s, "c")
		require.NoError(t, err)
		for _, cfg := range h.configs {
			p := &retention.Pruner{Store: s, Destination: "store", Policy: cfg.policy, Name: cfg.name, Now: func() time.Time { return now }}
			if cfg.window > 0 {
				chains := retention.ChainPolicy{Window: cfg.window, Others: h.continuousBut(cfg.name)}
				p.Chains = &chains
			}
			_, err := p.Prune(t.Context(), "c")
			if err != nil {
				require.ErrorIs(t, err, retention.ErrSkipped, "round %d", round)
			}
		}
		for k := range before {
			if _, ok := s.objects[k]; ok {
				continue
			}
			require.False(t, s.locked[k], "round %d: locked %s deleted", round, k)
			require.True(t, strings.HasPrefix(k, "c/") && !strings.Contains(strings.TrimPrefix(k, "c/"), "/"), "round %d: %s deleted", round, k)
			require.True(t, backup.IsDataName(strings.TrimPrefix(k, "c/")) || strings.HasSuffix(k, backup.ManifestSuffix), "round %d: %s deleted", round, k)
		}
		left, err := backup.ListBackups(t.Context(), s, "c")
		require.NoError(t, err)
		for _, e := range listed {
			if e.Kind == backup.KindInvalid || e.Kind == backup.KindLegacy || e.Kind == backup.KindForeign {
				require.True(t, slices.ContainsFunc(left, func(l backup.Entry) bool { return l.Key == e.Key }), "round %d: %s %s gone", round, e.Kind, e.Key)
			}
		}
		for _, cfg := range h.configs {
			was, is := configEntries(listed, cfg.name), configEntries(left, cfg.name)
			var newest backup.Entry
			for _, e := range was {
				if e.Kind == backup.KindBackup && e.Manifest.Etcd.Revision.Low > revision0(newest) {
					newest = e
				}
			}
			require.True(t, slices.ContainsFunc(is, func(e backup.Entry) bool { return e.Key == newest.Key }), "round %d: %s lost its newest backup by revision", round, cfg.name)
			if cfg.window == 0 {
				continue
			}
			from, to := revAt(now.Add(-cfg.window)), revAt(now)
			for range 40 {
				r := from + rng.Int64N(to-from+1)
				if restorable(was, r) {
					require.True(t, restorable(is, r), "round %d: %s: revision %d of the window lost", round, cfg.name, r)
				}
			}
		}
	}
}

func revision0(e backup.Entry) int64 {
	if e.Manifest == nil {
		return 0
	}
	return e.Manifest.Etcd.Revision.Low
}
