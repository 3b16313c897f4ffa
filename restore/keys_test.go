package restore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// fillKeys writes n keys under each of prefixes, 100 to a transaction.
func fillKeys(t *testing.T, c *clientv3.Client, prefixes []string, n int, value string) {
	t.Helper()
	for _, p := range prefixes {
		for i := 0; i < n; i += 100 {
			var ops []clientv3.Op
			for j := i; j < min(i+100, n); j++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%06d", p, j), fmt.Sprintf("%s-%s-%d", value, p, j)))
			}
			_, err := c.Txn(t.Context()).Then(ops...).Commit()
			require.NoError(t, err)
		}
	}
}

// keysAt returns the keys under prefixes at rev, as etcd serves them.
func keysAt(t *testing.T, c *clientv3.Client, prefixes []string, rev int64) map[string]*backup.KeyValue {
	t.Helper()
	out := map[string]*backup.KeyValue{}
	for _, p := range prefixes {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.Get(t.Context(), p, opts...)
		require.NoError(t, err)
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = &backup.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
				ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
		}
	}
	return out
}

// readScript reads a keys-json object knowing only its documented format,
// with encoding/json alone, as another tool would.
func readScript(t *testing.T, raw []byte) (map[string]any, map[string][]byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 32<<20)
	require.True(t, sc.Scan())
	var header map[string]any
	require.NoError(t, json.Unmarshal(sc.Bytes(), &header))
	values := map[string][]byte{}
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte(`{"end":`)) {
			break // the end line, last
		}
		var kv struct {
			Key, Value string
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &kv))
		k, err := base64.StdEncoding.DecodeString(kv.Key)
		require.NoError(t, err)
		v, err := base64.StdEncoding.DecodeString(kv.Value)
		require.NoError(t, err)
		values[string(k)] = v
	}
	require.NoError(t, sc.Err())
	return header, values
}

// TestKeysJSONExportImport exports two prefixes of a cluster of 20,000
// keys while writes go on, and imports the export into an empty etcd and
// into one that holds conflicting keys, in every mode.
func TestKeysJSONExportImport(t *testing.T) {
	ctx := t.Context()
	src := etcdtest.Start(t, etcdtest.WithName("source"))
	sc := src.Client(t)
	chosen := []string{"/registry/namespaces/", "/registry/configmaps/ns-a/"}
	fillKeys(t, sc, chosen, 1000, "v1")
	fillKeys(t, sc, []string{"/registry/configmaps/ns-b/", "/registry/pods/ns-a/"}, 9000, "v1")

	// Writes go on under the chosen prefixes while the export reads.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			_, _ = sc.Put(ctx, fmt.Sprintf("/registry/namespaces/%06d", i%1000), fmt.Sprintf("v2-%d", i))
			_, _ = sc.Delete(ctx, fmt.Sprintf("/registry/configmaps/ns-a/%06d", i%1000))
		}
	})
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	b := memBucket(t)
	p := &backup.Pipeline{Snapshotter: &backup.KeysExporter{Client: sc, Prefixes: chosen, PageSize: 500},
		Encryption: backup.Encryption{Recipients: []string{id.Recipient().String()}}}
	res, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "namespaces", Scheduled: true, Kind: backup.ManifestKindKeysJSON,
		Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}}})
	stop.Store(true)
	wg.Wait()
	require.NoError(t, err)
	m := res.Outcomes[0].Manifest
	rev := m.Etcd.Revision.Low
	require.True(t, m.Etcd.Revision.Exact())
	want := keysAt(t, sc, chosen, rev)
	require.EqualValues(t, len(want), m.Keys)

	// The export is listed as keys-json, found by kind, never as a snapshot.
	sources := []restore.Source{{Name: "d", Catalog: b}}
	_, err = restore.Find(ctx, sources, restore.Query{Cluster: "prod-a"})
	require.ErrorIs(t, err, restore.ErrNoBackup)
	found, err := restore.Find(ctx, sources, restore.Query{Cluster: "prod-a", Kind: backup.KindKeysJSON})
	require.NoError(t, err)
	require.Equal(t, res.ID, found.ID)
	restorer := &restore.Restorer{Identities: []age.Identity{id}}
	path := filepath.Join(t.TempDir(), "export.jsonl")
	_, err = restorer.Fetch(ctx, found, path)
	require.NoError(t, err)
	_, err = restorer.Restore(ctx, found, restore.Member{Name: "m", DataDir: filepath.Join(t.TempDir(), "d"), PeerURLs: []string{"http://127.0.0.1:2380"}})
	require.ErrorIs(t, err, restore.ErrNotRestorable, "a logical backup is no member snapshot")

	// Read as another tool would: exactly the source at the revision.
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	header, values := readScript(t, raw)
	require.Equal(t, "keys-json", header["format"])
	require.EqualValues(t, rev, header["revision"])
	require.Len(t, values, len(want))
	for k, kv := range want {
		require.Equal(t, string(kv.Value), string(values[k]), k)
	}

	t.Run("into an empty etcd", func(t *testing.T) {
		dst := etcdtest.Start(t, etcdtest.WithName("empty")).Client(t)
		_, err := dst.Put(ctx, "/outside/kept", "x")
		require.NoError(t, err)
		im := &restore.Importer{Client: dst}
		r, err := im.ImportFile(ctx, path)
		require.NoError(t, err)
		require.EqualValues(t, len(want), r.Created)
		got := keysAt(t, dst, chosen, 0)
		requireSameValues(t, want, got)
		requireValue(t, dst, "/outside/kept", "x")
	})

	t.Run("into an etcd with conflicts", func(t *testing.T) {
		dst := etcdtest.Start(t, etcdtest.WithName("conflicts")).Client(t)
		fillKeys(t, dst, []string{"/registry/namespaces/"}, 100, "theirs")
		_, err := dst.Put(ctx, "/registry/configmaps/ns-a/zz-extra", "only here")
		require.NoError(t, err)
		_, err = dst.Put(ctx, "/registry/configmaps/ns-b/000001", "outside the import")
		require.NoError(t, err)

		// Dry run: counts, changes nothing.
		head := revision(t, dst)
		dry := &restore.Importer{Client: dst, Mode: restore.Overwrite, DryRun: true, DeleteMissing: true}
		r, err := dry.ImportFile(ctx, path)
		require.NoError(t, err)
		assert.Equal(t, head, revision(t, dst), "a dry run writes nothing")
		assert.EqualValues(t, 1, r.Deleted)
		assert.NotEmpty(t, r.Changes)

		// Create-only leaves the 100 existing keys alone.
		r, err = (&restore.Importer{Client: dst}).ImportFile(ctx, path)
		require.NoError(t, err)
		conflicting := 0
		for i := range 100 {
			if _, ok := want[fmt.Sprintf("/registry/namespaces/%06d", i)]; ok {
				conflicting++
			}
		}
		assert.EqualValues(t, conflicting, r.Conflicts)
		assert.EqualValues(t, len(want)-conflicting, r.Created)
		requireValue(t, dst, "/registry/namespaces/000001", "theirs-/registry/namespaces/-1")

		// Overwrite with delete-missing: exactly the export under the chosen
		// prefixes, nothing touched outside them.
		r, err = (&restore.Importer{Client: dst, Mode: restore.Overwrite, DeleteMissing: true}).ImportFile(ctx, path)
		require.NoError(t, err)
		assert.EqualValues(t, conflicting, r.Overwritten)
		assert.EqualValues(t, 1, r.Deleted)
		requireSameValues(t, want, keysAt(t, dst, chosen, 0))
		requireValue(t, dst, "/registry/configmaps/ns-b/000001", "outside the import")
	})

	t.Run("one prefix under another name", func(t *testing.T) {
		dst := etcdtest.Start(t, etcdtest.WithName("renamed")).Client(t)
		im := &restore.Importer{Client: dst, Mapping: restore.KeyMapping{
			Prefixes: []string{"/registry/configmaps/ns-a/"}, StripPrefix: "/registry/configmaps/ns-a/", AddPrefix: "/registry/configmaps/ns-restored/"}}
		_, err := im.ImportFile(ctx, path)
		require.NoError(t, err)
		got := keysAt(t, dst, []string{""}, 0)
		for k := range got {
			require.True(t, strings.HasPrefix(k, "/registry/configmaps/ns-restored/"), k)
		}
		n := 0
		for k, kv := range want {
			if rest, ok := strings.CutPrefix(k, "/registry/configmaps/ns-a/"); ok {
				n++
				require.Equal(t, string(kv.Value), string(got["/registry/configmaps/ns-restored/"+rest].Value))
			}
		}
		require.Len(t, got, n)
	})
}

func revision(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(t.Context(), "health-probe")
	require.NoError(t, err)
	return resp.Header.Revision
}

func requireValue(t *testing.T, c *clientv3.Client, key, value string) {
	t.Helper()
	resp, err := c.Get(t.Context(), key)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, key)
	require.Equal(t, value, string(resp.Kvs[0].Value), key)
}

func requireSameValues(t *testing.T, want, got map[string]*backup.KeyValue) {
	t.Helper()
	require.Len(t, got, len(want))
	for k, kv := range want {
		require.Contains(t, got, k)
		require.Equal(t, string(kv.Value), string(got[k].Value), k)
	}
}

// TestImportRefusesHostileInput: every kind of broken object fails with a
// typed error before anything is written.
func TestImportRefusesHostileInput(t *testing.T) {
	ctx := t.Context()
	dst := etcdtest.Start(t).Client(t)
	head := `{"format":"keys-json","version":1,"revision":10,"prefixes":["/a/"],"created":"2026-11-24T19:00:00Z"}` + "\n"
	line := func(key, value string) string {
		return fmt.Sprintf(`{"key":%q,"create_revision":2,"mod_revision":3,"version":1,"value":%q}`+"\n",
			base64.StdEncoding.EncodeToString([]byte(key)), base64.StdEncoding.EncodeToString([]byte(value)))
	}
	good := line("/a/1", "one")
	huge := `{"key":"` + strings.Repeat("A", 100<<20) + "\"}\n"
	for name, body := range map[string]string{
		"bad header":       `{"format":"keys","version":1}` + "\n" + good,
		"no header":        "",
		"truncated line":   head + good + strings.TrimSuffix(line("/a/2", "two"), "}\n"),
		"outside prefixes": head + good + line("/b/1", "x"),
		"invalid base64":   head + good + `{"key":"L2EvMg==","create_revision":2,"mod_revision":3,"version":1,"value":"%%%"}` + "\n",
		"out of order":     head + line("/a/2", "two") + good,
		"after revision":   head + strings.Replace(good, `"mod_revision":3`, `"mod_revision":11`, 1),
		"unknown field":    head + strings.Replace(good, `"version":1`, `"version":1,"extra":1`, 1),
		"100 MiB line":     head + good + huge,
		"trailing garbage": head + good + "not json\n",
	} {
		t.Run(name, func(t *testing.T) {
			before := revision(t, dst)
			_, err := (&restore.Importer{Client: dst, Mode: restore.Overwrite}).Import(ctx, strings.NewReader(body))
			require.ErrorIs(t, err, backup.ErrKeysJSON)
			require.Equal(t, before, revision(t, dst), "nothing written")
		})
	}
}

// TestDiffFindsWhatADeployDeleted compares an export with the live etcd.
func TestDiffFindsWhatADeployDeleted(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.Start(t).Client(t)
	fillKeys(t, c, []string{"/registry/deployments/"}, 50, "v")
	var buf bytes.Buffer
	snap, err := (&backup.KeysExporter{Client: c, Prefixes: []string{"/registry/deployments/"}}).Snapshot(ctx)
	require.NoError(t, err)
	_, err = buf.ReadFrom(snap)
	require.NoError(t, err)
	require.True(t, snap.Info().Complete)
	require.EqualValues(t, 50, snap.Info().Keys)

	_, err = c.Delete(ctx, "/registry/deployments/000007")
	require.NoError(t, err)
	_, err = c.Put(ctx, "/registry/deployments/000008", "changed")
	require.NoError(t, err)
	_, err = c.Put(ctx, "/registry/deployments/new", "added")
	require.NoError(t, err)

	from, _, err := restore.KeysJSONSource(&buf, restore.KeyMapping{})
	require.NoError(t, err)
	var got []string
	err = restore.Diff(ctx, from, restore.NewEtcdKeys(c, []string{"/registry/deployments/"}), func(ch restore.KeyChange) error {
		got = append(got, ch.Op+" "+string(ch.Key))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"removed /registry/deployments/000007", "changed /registry/deployments/000008", "added /registry/deployments/new"}, got)
}

// TestImportLargeValues: transactions are bounded by bytes too, so keys
// with large values import within etcd's request limit (1.5 MiB).
func TestImportLargeValues(t *testing.T) {
	ctx := t.Context()
	src := etcdtest.Start(t, etcdtest.WithName("large-source")).Client(t)
	value := strings.Repeat("v", 300<<10)
	for i := range 30 {
		_, err := src.Put(ctx, fmt.Sprintf("/registry/secrets/k%02d", i), value)
		require.NoError(t, err)
	}
	snap, err := (&backup.KeysExporter{Client: src}).Snapshot(ctx)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = buf.ReadFrom(snap)
	require.NoError(t, err)

	dst := etcdtest.Start(t, etcdtest.WithName("large-target")).Client(t)
	r, err := (&restore.Importer{Client: dst}).Import(ctx, &buf)
	require.NoError(t, err)
	require.EqualValues(t, 30, r.Created)
	requireSameValues(t, keysAt(t, src, []string{"/registry/secrets/"}, 0), keysAt(t, dst, []string{"/registry/secrets/"}, 0))
}

// noStreamKV is an etcd client's KV as a server older than 3.7 serves it:
// no RangeStream.
type noStreamKV struct {
	clientv3.KV
	asked *atomic.Int64
}

func (kv noStreamKV) GetStream(context.Context, string, ...clientv3.OpOption) (clientv3.GetStreamChan, error) {
	kv.asked.Add(1)
	return nil, status.Error(codes.Unimplemented, "unknown method RangeStream")
}

// TestExportStreamsOrPages: an export streams the ranges from etcd, pages
// through them on a server without RangeStream (once asked, it does not
// ask again), or with NoStream, and all three hold the same keys: those
// etcd serves at the export's revision.
func TestExportStreamsOrPages(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	prefixes := []string{"/registry/a/", "/registry/b/"}
	fillKeys(t, cli, prefixes, 3000, strings.Repeat("v", 600))

	export := func(c *clientv3.Client, noStream bool) (map[string][]byte, float64) {
		t.Helper()
		snap, err := (&backup.KeysExporter{Client: c, Prefixes: prefixes, PageSize: 500, NoStream: noStream}).Snapshot(t.Context())
		require.NoError(t, err)
		raw, err := io.ReadAll(snap)
		require.NoError(t, err)
		require.NoError(t, snap.Close())
		header, values := readScript(t, raw)
		return values, header["revision"].(float64)
	}
	streamed, rev := export(cli, false)
	want := keysAt(t, cli, prefixes, int64(rev))
	require.Len(t, want, 6000)
	require.Len(t, streamed, len(want))
	for k, kv := range want {
		require.Equal(t, kv.Value, streamed[k], k)
	}

	old := srv.Client(t)
	asked := &atomic.Int64{}
	old.KV = noStreamKV{KV: old.KV, asked: asked}
	paged, _ := export(old, false)
	require.Equal(t, streamed, paged, "a server without RangeStream gives the same keys, page by page")
	require.Equal(t, int64(1), asked.Load(), "asked once, then paged for every range")

	asked.Store(0)
	paged, _ = export(old, true)
	require.Equal(t, streamed, paged)
	require.Zero(t, asked.Load(), "NoStream never asks")
}

// passKV is the client's own KV behind a type of the caller's, as a
// namespace or a proxy sets one: the exporter reads through it.
type passKV struct{ clientv3.KV }

// TestExportReadsTheConnection: an export from a client whose KV is its
// own writes its key lines from the buffers gRPC received each chunk in;
// the object is byte for byte the one read through a KV the caller set,
// whatever the sizes of keys and values across gRPC's 16 KiB frames, and
// with leases, empty values and binary bytes.
func TestExportReadsTheConnection(t *testing.T) {
	ctx := t.Context()
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	lease, err := cli.Grant(ctx, 3600)
	require.NoError(t, err)
	sizes := []int{0, 1, 100, 5 << 10, 16<<10 - 40, 16 << 10, 16<<10 + 1, 40 << 10, 300 << 10, 1 << 20}
	// Every value size with every key length (70 pairs), three times.
	for i := range 210 {
		value := bytes.Repeat([]byte{byte(i), 0, '"', '\n', 0xff}, sizes[i%len(sizes)]/5+1)[:sizes[i%len(sizes)]]
		key := fmt.Sprintf("/registry/k/%s%05d", strings.Repeat("x", i%7*3000), i)
		var opts []clientv3.OpOption
		if i%3 == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		_, err := cli.Put(ctx, key, string(value), opts...)
		require.NoError(t, err)
	}
	now := func() time.Time { return time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC) }
	export := func(c *clientv3.Client) []byte {
		t.Helper()
		snap, err := (&backup.KeysExporter{Client: c, Now: now}).Snapshot(ctx)
		require.NoError(t, err)
		raw, err := io.ReadAll(snap)
		require.NoError(t, err)
		require.NoError(t, snap.Close())
		return raw
	}
	direct := export(cli)
	wrapped := srv.Client(t)
	wrapped.KV = passKV{KV: wrapped.KV}
	require.Equal(t, export(wrapped), direct)

	header, values := readScript(t, direct)
	want := keysAt(t, cli, []string{"/registry/k/"}, int64(header["revision"].(float64)))
	require.Len(t, values, 210)
	for k, kv := range want {
		require.Equal(t, len(kv.Value), len(values[k]), k)
		require.True(t, bytes.Equal(kv.Value, values[k]), k)
	}
	r, err := backup.NewKeysJSONReader(bytes.NewReader(direct))
	require.NoError(t, err)
	for {
		kv, err := r.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Equal(t, want[string(kv.Key)], &kv)
	}
}

// TestExportFailsOnCompaction: a compaction past an export's revision
// while it streams fails it with etcd's ErrCompacted, and the keys read
// before do not make a complete object.
func TestExportFailsOnCompaction(t *testing.T) {
	ctx := t.Context()
	cli := etcdtest.Start(t).Client(t)
	fillKeys(t, cli, []string{"/registry/c/"}, 3000, strings.Repeat("v", 10<<10))
	snap, err := (&backup.KeysExporter{Client: cli}).Snapshot(ctx)
	require.NoError(t, err)
	defer snap.Close()
	// The writer is blocked on the pipe until it is read, and etcd on
	// gRPC's flow control: the stream is not read to its end yet.
	put, err := cli.Put(ctx, "/other", "x")
	require.NoError(t, err)
	_, err = cli.Compact(ctx, put.Header.Revision)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, snap)
	require.ErrorIs(t, err, rpctypes.ErrCompacted)
}
