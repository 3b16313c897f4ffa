package destination_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/destination"
)

// waitFor bounds the real time a test waits for the registry's
// goroutines: long enough for a busy machine, where checks and syncs run
// late.
const waitFor = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newRegistry returns a registry closed when the test ends.
func newRegistry(t *testing.T, opts destination.Options) *destination.Registry {
	t.Helper()
	r, err := destination.NewRegistry(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// rawSnapshot returns a stream shaped like etcd's: blocks of 512 bytes
// followed by their sha256.
func rawSnapshot(blocks int, seed uint64) []byte {
	return backuptest.Stream(blocks, seed)
}

// snapshotter serves a stream through backup.NewSnapshot. With gate set,
// the stream stops after its first half until gate is closed, and reached
// is closed when it gets there.
type snapshotter struct {
	stream  []byte
	gate    chan struct{}
	reached chan struct{}
	once    sync.Once
}

func (s *snapshotter) Snapshot(context.Context) (*backup.Snapshot, error) {
	var r io.Reader = bytes.NewReader(s.stream)
	if s.gate != nil {
		half := len(s.stream) / 2
		r = io.MultiReader(bytes.NewReader(s.stream[:half]), gateReader{s}, bytes.NewReader(s.stream[half:]))
	}
	info := backup.SnapshotInfo{Endpoint: "fake", MemberID: 1, ClusterID: 2, EtcdVersion: "3.7.3", RevisionLow: 7, Started: time.Now()}
	return backup.NewSnapshot(io.NopCloser(r), info, func(i backup.SnapshotInfo) (backup.SnapshotInfo, error) {
		i.RevisionHigh = 7
		return i, nil
	}), nil
}

type gateReader struct{ s *snapshotter }

func (g gateReader) Read([]byte) (int, error) {
	g.s.once.Do(func() { close(g.s.reached) })
	<-g.s.gate
	return 0, io.EOF
}

// runBackup writes one backup of cluster to the targets and requires it
// to succeed everywhere.
func runBackup(t *testing.T, ctx context.Context, cluster, name string, seed uint64, targets ...backup.Target) *backup.Result {
	t.Helper()
	p := backup.Pipeline{Snapshotter: &snapshotter{stream: rawSnapshot(8, seed)}}
	res, err := p.Run(ctx, backup.Request{Cluster: cluster, Name: name, Targets: targets})
	require.NoError(t, err)
	return res
}

// logBuffer is a slog handler's output, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// events records observer events.
type events struct {
	mu  sync.Mutex
	all []destination.Event
}

func (e *events) Observe(ev destination.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) of(kind destination.EventKind, dest string) []destination.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []destination.Event
	for _, ev := range e.all {
		if ev.Kind == kind && ev.Destination == dest {
			out = append(out, ev)
		}
	}
	return out
}
