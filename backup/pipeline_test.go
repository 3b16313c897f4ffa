package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
)

// fakeSnapshot returns bytes shaped like an etcd snapshot stream: a body of
// whole 512-byte blocks with some structure (so it compresses a little)
// followed by the sha256 trailer.
func fakeSnapshot(t testing.TB, blocks int, seed uint64) []byte {
	return backuptest.Stream(blocks, seed)
}

// snapshotter serves a fixed stream through backup.NewSnapshot.
type snapshotter struct {
	stream []byte
	calls  int
	closed chan struct{} // closed when the first snapshot is
	once   sync.Once
}

func newSnapshotter(stream []byte) *snapshotter {
	return &snapshotter{stream: stream, closed: make(chan struct{})}
}

func (s *snapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	s.calls++
	info := backup.SnapshotInfo{Endpoint: "fake", MemberID: 0xabc, ClusterID: 0xdef, EtcdVersion: "3.7.3", RevisionLow: 41}
	rc := &closeNotifier{Reader: bytes.NewReader(s.stream), closed: s.closed, once: &s.once}
	return backup.NewSnapshot(rc, info, func(i backup.SnapshotInfo) (backup.SnapshotInfo, error) {
		i.RevisionHigh = 42
		return i, nil
	}), nil
}

type closeNotifier struct {
	io.Reader
	once   *sync.Once
	closed chan struct{}
}

func (c *closeNotifier) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// memUploader keeps uploads in memory. failAfter > 0 makes Upload fail
// after reading that many bytes.
type memUploader struct {
	mu        sync.Mutex
	data      map[string][]byte
	manifests map[string]*backup.Manifest
	failAfter int64
	// failErr, when set, is the error of a failAfter failure.
	failErr   error
	commitErr error
	// sawSnapshotClosed records whether the snapshot was closed when the
	// upload read its first byte (spool mode).
	snapshotClosed    <-chan struct{}
	sawSnapshotClosed bool
}

func newMemUploader() *memUploader {
	return &memUploader{data: map[string][]byte{}, manifests: map[string]*backup.Manifest{}}
}

var errUploadBroke = errors.New("upload broke")

func (u *memUploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	var buf bytes.Buffer
	first := make([]byte, 1)
	if _, err := io.ReadFull(r, first); err != nil {
		return err
	}
	if u.snapshotClosed != nil {
		select {
		case <-u.snapshotClosed:
			u.sawSnapshotClosed = true
		default:
		}
	}
	buf.Write(first)
	if u.failAfter > 0 {
		if _, err := io.CopyN(&buf, r, u.failAfter); err != nil {
			return err
		}
		if u.failErr != nil {
			return u.failErr
		}
		return errUploadBroke
	}
	if _, err := io.Copy(&buf, r); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.data[m.DataKey] = buf.Bytes()
	return nil
}

func (u *memUploader) Commit(ctx context.Context, m *backup.Manifest) error {
	if u.commitErr != nil {
		return u.commitErr
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.data[m.DataKey]; !ok {
		return errors.New("commit without data")
	}
	u.manifests[m.ID] = m
	return nil
}

func (u *memUploader) only(t *testing.T) (*backup.Manifest, []byte) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	require.Len(t, u.manifests, 1)
	for _, m := range u.manifests {
		return m, u.data[m.DataKey]
	}
	return nil, nil
}

func decode(t *testing.T, m *backup.Manifest, stored []byte, ids ...age.Identity) []byte {
	t.Helper()
	sum := sha256.Sum256(stored)
	require.Equal(t, hex.EncodeToString(sum[:]), m.Stored.SHA256, "stored sha256")
	require.EqualValues(t, len(stored), m.Stored.Size)
	r, err := backup.NewDecoder(bytes.NewReader(stored), m.Compression, ids...)
	require.NoError(t, err)
	defer r.Close()
	raw, err := io.ReadAll(r)
	require.NoError(t, err)
	return raw
}

type recorder struct {
	mu     sync.Mutex
	events []backup.Event
}

func (r *recorder) Observe(e backup.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []backup.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []backup.EventKind
	for _, e := range r.events {
		if e.Kind != backup.Progress {
			out = append(out, e.Kind)
		}
	}
	return out
}

func fixedClock() func() time.Time {
	t0 := time.Date(2026, 11, 22, 2, 30, 0, 0, time.UTC)
	var mu sync.Mutex
	n := 0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		n++
		return t0.Add(time.Duration(n) * time.Millisecond)
	}
}

func TestPipelineRoundTrip(t *testing.T) {
	defer goleak.VerifyNone(t)
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	rotated, err := age.GenerateX25519Identity()
	require.NoError(t, err)

	for _, tc := range []struct {
		name        string
		compression backup.Compression
		encrypt     bool
		spool       bool
	}{
		{"zstd", backup.Zstd, false, false},
		{"zstd+age", "", true, false},
		{"gzip", backup.Gzip, false, false},
		{"none+age", backup.None, true, false},
		{"spool zstd+age", backup.Zstd, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := fakeSnapshot(t, 3000, 1)
			snap := newSnapshotter(stream)
			a, b := newMemUploader(), newMemUploader()
			rec := &recorder{}
			p := &backup.Pipeline{Snapshotter: snap, Compression: tc.compression, Observer: rec, Now: fixedClock()}
			if tc.encrypt {
				p.Encryption.Recipients = []string{id.Recipient().String(), rotated.Recipient().String()}
			}
			if tc.spool {
				p.Spool = &backup.Spool{Dir: t.TempDir()}
				a.snapshotClosed, b.snapshotClosed = snap.closed, snap.closed
			}
			res, err := p.Run(t.Context(), backup.Request{
				Cluster: "prod-a", Name: "daily", Scheduled: true,
				Targets: []backup.Target{{Destination: "a", Uploader: a}, {Destination: "b", Uploader: b}},
			})
			require.NoError(t, err)
			require.Equal(t, []string{"a", "b"}, res.Succeeded())
			// memUploader overwrites, so the ID carries the run's token.
			require.Regexp(t, `^prod-a-daily-20261122T023000\.001Z-[0-9a-f]{8}$`, res.ID)
			require.Equal(t, 1, snap.calls, "one snapshot read for every destination")

			for _, u := range []*memUploader{a, b} {
				m, stored := u.only(t)
				var ids []age.Identity
				if tc.encrypt {
					ids = []age.Identity{rotated} // either recipient decrypts
					require.NotNil(t, m.Encryption)
					require.Len(t, m.Encryption.Recipients, 2)
					for _, fp := range m.Encryption.Recipients {
						require.NotContains(t, id.Recipient().String(), fp[len("sha256:"):])
					}
				} else {
					require.Nil(t, m.Encryption)
				}
				require.Equal(t, stream, decode(t, m, stored, ids...))
				rawSum := sha256.Sum256(stream)
				require.Equal(t, hex.EncodeToString(rawSum[:]), m.Raw.SHA256)
				require.EqualValues(t, len(stream), m.Raw.Size)
				require.Equal(t, backup.RevisionInfo{Low: 41, High: 42}, m.Etcd.Revision)
				require.Equal(t, "abc", m.Etcd.MemberID)
				require.Equal(t, "def", m.Etcd.ClusterID)
				require.Equal(t, "3.7.3", m.Etcd.Version)
				require.Equal(t, tc.compression.OrDefault(), m.Compression)
				require.NoError(t, m.Validate())
				body, err := m.Marshal()
				require.NoError(t, err)
				parsed, err := backup.ParseManifest(bytes.NewReader(body))
				require.NoError(t, err)
				require.Equal(t, m.ID, parsed.ID)
				if tc.spool {
					require.True(t, u.sawSnapshotClosed, "spool mode uploads after the snapshot is closed")
				}
			}
			ma, _ := a.only(t)
			mb, _ := b.only(t)
			require.Equal(t, "a", ma.Destination)
			require.Equal(t, "b", mb.Destination)
			require.Equal(t, ma.Stored, mb.Stored, "both destinations got the same bytes")

			kinds := rec.kinds()
			require.Equal(t, backup.Started, kinds[0])
			require.ElementsMatch(t, []backup.EventKind{backup.Uploaded, backup.Uploaded}, kinds[1:3])
			require.Equal(t, backup.Completed, kinds[3])
		})
	}
}

func TestPipelineRejectsDamagedSnapshots(t *testing.T) {
	defer goleak.VerifyNone(t)
	good := fakeSnapshot(t, 2000, 2)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	for name, stream := range map[string][]byte{
		"flipped bit": flipped,
		"truncated":   good[:len(good)-100],
		"no trailer":  good[:len(good)-32],
		"empty":       {},
	} {
		t.Run(name, func(t *testing.T) {
			for _, spool := range []bool{false, true} {
				u := newMemUploader()
				rec := &recorder{}
				p := &backup.Pipeline{Snapshotter: newSnapshotter(stream), Observer: rec}
				if spool {
					p.Spool = &backup.Spool{Dir: t.TempDir()}
				}
				res, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n",
					Targets: []backup.Target{{Destination: "d", Uploader: u}}})
				require.ErrorIs(t, err, backup.ErrSnapshotIntegrity)
				var de *backup.DestinationError
				require.ErrorAs(t, err, &de)
				require.Equal(t, "d", de.Destination)
				require.Empty(t, res.Succeeded())
				require.Empty(t, u.manifests, "nothing committed")
				require.Empty(t, u.data, "no upload completed")
				kinds := rec.kinds()
				require.Equal(t, backup.Failed, kinds[len(kinds)-1])
			}
		})
	}
}

func TestPipelineOneTargetFails(t *testing.T) {
	defer goleak.VerifyNone(t)
	stream := fakeSnapshot(t, 4000, 3)
	good1, bad, good2 := newMemUploader(), newMemUploader(), newMemUploader()
	bad.failAfter = 64 << 10
	commitFails := newMemUploader()
	commitFails.commitErr = errors.New("manifest refused")
	p := &backup.Pipeline{Snapshotter: newSnapshotter(stream), Compression: backup.None}
	res, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Targets: []backup.Target{
		{Destination: "good1", Uploader: good1}, {Destination: "bad", Uploader: bad},
		{Destination: "good2", Uploader: good2}, {Destination: "commit-fails", Uploader: commitFails},
	}})
	require.Error(t, err)
	require.ErrorIs(t, err, errUploadBroke)
	require.Equal(t, []string{"good1", "good2"}, res.Succeeded())
	require.ErrorIs(t, res.Outcomes[1].Err, errUploadBroke)
	require.ErrorContains(t, res.Outcomes[3].Err, "manifest refused")
	for _, u := range []*memUploader{good1, good2} {
		m, stored := u.only(t)
		require.Equal(t, stream, decode(t, m, stored))
	}
	require.Empty(t, bad.manifests)
	require.Empty(t, commitFails.manifests)
}

func TestPipelineAllTargetsFail(t *testing.T) {
	defer goleak.VerifyNone(t)
	a, b := newMemUploader(), newMemUploader()
	a.failAfter, b.failAfter = 1, 1000
	p := &backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 4000, 4))}
	res, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Targets: []backup.Target{
		{Destination: "a", Uploader: a}, {Destination: "b", Uploader: b}}})
	require.ErrorIs(t, err, errUploadBroke)
	require.Empty(t, res.Succeeded())
}

func TestPipelineRejectsBadRequests(t *testing.T) {
	u := newMemUploader()
	target := []backup.Target{{Destination: "d", Uploader: u}}
	for name, req := range map[string]backup.Request{
		"cluster with slash":   {Cluster: "a/b", Name: "n", Targets: target},
		"cluster dot dot":      {Cluster: "..", Name: "n", Targets: target},
		"name with NUL":        {Cluster: "c", Name: "n\x00", Targets: target},
		"long name":            {Cluster: "c", Name: string(bytes.Repeat([]byte("n"), 64)), Targets: target},
		"bad destination name": {Cluster: "c", Name: "n", Targets: []backup.Target{{Destination: "D/x", Uploader: u}}},
	} {
		t.Run(name, func(t *testing.T) {
			snap := newSnapshotter(fakeSnapshot(t, 1, 5))
			p := &backup.Pipeline{Snapshotter: snap}
			_, err := p.Run(t.Context(), req)
			require.ErrorIs(t, err, backup.ErrInvalidName)
			require.Zero(t, snap.calls, "nothing read")
		})
	}
	snap := newSnapshotter(fakeSnapshot(t, 1, 5))
	_, err := (&backup.Pipeline{Snapshotter: snap}).Run(t.Context(), backup.Request{Cluster: "c", Name: "n"})
	require.ErrorContains(t, err, "no targets")
	_, err = (&backup.Pipeline{Snapshotter: snap, Encryption: backup.Encryption{Recipients: []string{"AGE-SECRET-KEY-1XYZ"}}}).
		Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Targets: target})
	require.ErrorIs(t, err, backup.ErrInvalidRecipient)
	require.NotContains(t, err.Error(), "AGE-SECRET-KEY", "a key given by mistake is not echoed")
	_, err = (&backup.Pipeline{Snapshotter: snap, Compression: "lz4"}).Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Targets: target})
	require.ErrorIs(t, err, backup.ErrUnknownCompression)
	require.Zero(t, snap.calls)
}

func TestDecoderErrors(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	other, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	stream := fakeSnapshot(t, 3000, 6)
	u := newMemUploader()
	p := &backup.Pipeline{Snapshotter: newSnapshotter(stream), Encryption: backup.Encryption{Recipients: []string{id.Recipient().String()}}}
	_, err = p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Targets: []backup.Target{{Destination: "d", Uploader: u}}})
	require.NoError(t, err)
	m, stored := u.only(t)

	_, err = backup.NewDecoder(bytes.NewReader(stored), m.Compression, other)
	require.ErrorIs(t, err, backup.ErrDecrypt)

	readAll := func(b []byte) error {
		r, err := backup.NewDecoder(bytes.NewReader(b), m.Compression, id)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(io.Discard, r)
		return err
	}
	flipped := bytes.Clone(stored)
	flipped[len(flipped)/2] ^= 1
	assert.ErrorIs(t, readAll(flipped), backup.ErrIntegrity, "flipped byte")
	assert.ErrorIs(t, readAll(stored[:len(stored)-1]), backup.ErrIntegrity, "truncated by one byte")
	assert.ErrorIs(t, readAll(stored[:len(stored)/2]), backup.ErrIntegrity, "truncated by half")
	assert.NoError(t, readAll(stored))
}

// TestDecoderPassesSourceErrors: a download that breaks off is not damage.
func TestDecoderPassesSourceErrors(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	for _, tc := range []struct {
		compression backup.Compression
		encrypt     bool
	}{{backup.Zstd, true}, {backup.Gzip, false}, {backup.None, true}, {backup.Zstd, false}} {
		u := newMemUploader()
		p := &backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 3000, 8)), Compression: tc.compression}
		var ids []age.Identity
		if tc.encrypt {
			p.Encryption.Recipients = []string{id.Recipient().String()}
			ids = append(ids, id)
		}
		_, err = p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Targets: []backup.Target{{Destination: "d", Uploader: u}}})
		require.NoError(t, err)
		m, stored := u.only(t)
		for _, at := range []int{0, 10, len(stored) / 2} {
			src := io.MultiReader(bytes.NewReader(stored[:at]), iotestErrReader{errNetwork})
			err := func() error {
				r, err := backup.NewDecoder(src, m.Compression, ids...)
				if err != nil {
					return err
				}
				defer r.Close()
				_, err = io.Copy(io.Discard, r)
				return err
			}()
			require.ErrorIs(t, err, errNetwork, "%s encrypted=%v at %d", tc.compression, tc.encrypt, at)
			require.NotErrorIs(t, err, backup.ErrIntegrity, "%s encrypted=%v at %d", tc.compression, tc.encrypt, at)
		}
	}
}

var errNetwork = errors.New("connection reset by peer")

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }
