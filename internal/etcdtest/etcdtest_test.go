package etcdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestStartFillAndRead(t *testing.T) {
	s := Start(t)
	require.Len(t, s.Endpoints(), 1)
	assert.DirExists(t, s.DataDir())
	assert.True(t, s.IsLeader())

	ctx := testContext(t)
	cli := s.Client(t)
	res, err := Fill(ctx, cli, FillOptions{Keys: 1000, Prefix: "/test", ValueSize: 3000, Seed: 7})
	require.NoError(t, err)
	assert.Equal(t, 1000, res.Keys)
	assert.Equal(t, 10, res.Txns, "100 operations per transaction")
	assert.InDelta(t, 3000*1000, res.ValueBytes, 3000*1000*0.01)

	resp, err := cli.Get(ctx, "/test", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.EqualValues(t, 1000, resp.Count)
	assert.Equal(t, res.Revision, resp.Header.Revision)

	get, err := cli.Get(ctx, FillKey("/test", 42))
	require.NoError(t, err)
	require.Len(t, get.Kvs, 1)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(get.Kvs[0].Value, &obj), "values are JSON")
	assert.Contains(t, obj, "apiVersion")
	meta, ok := obj["metadata"].(map[string]any)
	require.True(t, ok)
	assert.Contains(t, meta, "uid")
	assert.Contains(t, meta, "labels")
	assert.Len(t, get.Kvs[0].Value, 3000)

	s.Stop()
	s.Stop() // idempotent
}

func TestFillDeterministicAndCompressible(t *testing.T) {
	gen := func(seed int64) [][]byte {
		g := newObjectGen(seed)
		var vs [][]byte
		for i := range 500 {
			_, v := g.object("/registry", i, 4096)
			vs = append(vs, v)
		}
		return vs
	}
	a, b, c := gen(1), gen(1), gen(2)
	assert.Equal(t, a, b, "same seed, same values")
	assert.NotEqual(t, a, c, "another seed, other values")

	all := bytes.Join(a, nil)
	enc, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	compressed := enc.EncodeAll(all, nil)
	require.NoError(t, enc.Close())
	ratio := float64(len(all)) / float64(len(compressed))
	t.Logf("zstd ratio on %d bytes: %.2f", len(all), ratio)
	assert.GreaterOrEqual(t, ratio, 2.5, "compresses like cluster data, not like random bytes")
	assert.LessOrEqual(t, ratio, 6.0, "does not compress like zero-filled data")
}

func TestStartClusterWithLearner(t *testing.T) {
	servers := StartCluster(t, 3)
	require.Len(t, servers, 3)
	leader := Leader(t, servers)
	learner := AddLearner(t, servers)

	ctx := testContext(t)
	cli := leader.Client(t)
	_, err := cli.Put(ctx, "k", "v")
	require.NoError(t, err)

	members, err := cli.MemberList(ctx)
	require.NoError(t, err)
	require.Len(t, members.Members, 4)
	var learners int
	for _, m := range members.Members {
		if m.IsLearner {
			learners++
			assert.Equal(t, learner.ID(), m.ID)
		}
	}
	assert.Equal(t, 1, learners)

	// The learner catches up and answers status and serializable reads.
	lc := learner.Client(t)
	require.Eventually(t, func() bool {
		r, err := lc.Get(ctx, "k", clientv3.WithSerializable())
		return err == nil && len(r.Kvs) == 1
	}, 20*time.Second, 50*time.Millisecond)
	st, err := lc.Status(ctx, learner.Endpoints()[0])
	require.NoError(t, err)
	assert.True(t, st.IsLearner)
}

func TestClientTLSAndAuth(t *testing.T) {
	ca := NewCA(t)
	files := ca.Issue(t, CertOptions{})
	s := Start(t, WithClientTLS(files, true))
	assert.Contains(t, s.Endpoints()[0], "https://")
	EnableAuth(t, "s3cret", s)

	ctx := testContext(t)
	cli := s.Client(t)
	_, err := cli.Put(ctx, "k", "v")
	require.NoError(t, err)

	// Without credentials the server refuses writes.
	anon, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), TLS: s.ClientTLS(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer anon.Close()
	_, err = anon.Put(ctx, "k", "v2")
	require.Error(t, err)
}
