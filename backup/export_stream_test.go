package backup

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// buffers splits b into buffers of n bytes, as gRPC hands a message to a
// codec in the frames it came in.
func buffers(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		s = append(s, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return s
}

// parseChunk returns the KeyValues chunkParser reads from b split into
// buffers of n bytes, copied.
func parseChunk(b []byte, n int) ([]KeyValue, error) {
	var p chunkParser
	var kvs []KeyValue
	err := p.each(buffers(b, n), func(kv KeyValue) error {
		kvs = append(kvs, normalKV(kv))
		return nil
	})
	return kvs, err
}

// normalKV returns a copy of kv, with an empty key or value as nil.
func normalKV(kv KeyValue) KeyValue {
	clone := func(b []byte) []byte {
		if len(b) == 0 {
			return nil
		}
		return bytes.Clone(b)
	}
	kv.Key, kv.Value = clone(kv.Key), clone(kv.Value)
	return kv
}

// sameKVs fails t, briefly, unless got are want.
func sameKVs(t *testing.T, want, got []KeyValue, msg any) {
	t.Helper()
	require.Equal(t, len(want), len(got), msg)
	for i := range want {
		if !reflect.DeepEqual(want[i], got[i]) {
			t.Fatalf("%v: key %d differs: key %d bytes, value %d bytes, parsed %d and %d", msg, i, len(want[i].Key), len(want[i].Value), len(got[i].Key), len(got[i].Value))
		}
	}
}

// decodedKVs returns the KeyValues of a RangeStreamResponse as protobuf
// decodes them.
func decodedKVs(m *pb.RangeStreamResponse) []KeyValue {
	var kvs []KeyValue
	for _, kv := range m.GetRangeResponse().GetKvs() {
		kvs = append(kvs, normalKV(KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
			Version: kv.Version, Value: kv.Value, Lease: kv.Lease}))
	}
	return kvs
}

func testChunk(t *testing.T) (*pb.RangeStreamResponse, []byte) {
	t.Helper()
	m := &pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{
		Header: &pb.ResponseHeader{ClusterId: 7, MemberId: 8, Revision: 900, RaftTerm: 2},
		More:   true, Count: 1234,
	}}
	for i, size := range []int{0, 1, 3, 100, 16 << 10, 70 << 10, 5} {
		m.RangeResponse.Kvs = append(m.RangeResponse.Kvs, &mvccpb.KeyValue{
			Key:            append([]byte("/registry/"), bytes.Repeat([]byte{byte('a' + i)}, i*500)...),
			CreateRevision: int64(i + 1), ModRevision: int64(i*100 + 1), Version: int64(i + 1),
			Value: bytes.Repeat([]byte{byte(i), 0xff, '\n'}, size)[:size], Lease: int64(i % 2 * 99),
		})
	}
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return m, b
}

// TestChunkParserAcrossBuffers: the KeyValues read from a chunk are the
// ones protobuf decodes, wherever the buffers it came in split it, and
// fields the parser does not know are skipped.
func TestChunkParserAcrossBuffers(t *testing.T) {
	m, b := testChunk(t)
	want := decodedKVs(m)
	for _, n := range []int{1, 2, 3, 7, 100, 4096, 16 << 10, len(b)} {
		got, err := parseChunk(b, n)
		require.NoError(t, err, n)
		sameKVs(t, want, got, n)
	}

	// Unknown fields of every wire type, in the chunk and in a KeyValue.
	kv := protowire.AppendTag(nil, 1, protowire.BytesType)
	kv = protowire.AppendBytes(kv, []byte("/k"))
	kv = protowire.AppendTag(kv, 9, protowire.Fixed64Type)
	kv = protowire.AppendFixed64(kv, 1)
	kv = protowire.AppendTag(kv, 2, protowire.VarintType)
	kv = protowire.AppendVarint(kv, 5)
	kv = protowire.AppendTag(kv, 10, protowire.Fixed32Type)
	kv = protowire.AppendFixed32(kv, 1)
	kv = protowire.AppendTag(kv, 11, protowire.BytesType)
	kv = protowire.AppendBytes(kv, []byte("later"))
	rr := protowire.AppendTag(nil, 12, protowire.VarintType)
	rr = protowire.AppendVarint(rr, 1<<40)
	rr = protowire.AppendTag(rr, 2, protowire.BytesType)
	rr = protowire.AppendBytes(rr, kv)
	chunk := protowire.AppendTag(nil, 1, protowire.BytesType)
	chunk = protowire.AppendBytes(chunk, rr)
	chunk = protowire.AppendTag(chunk, 13, protowire.Fixed32Type)
	chunk = protowire.AppendFixed32(chunk, 3)
	for _, n := range []int{1, 5, len(chunk)} {
		got, err := parseChunk(chunk, n)
		require.NoError(t, err)
		require.Equal(t, []KeyValue{{Key: []byte("/k"), CreateRevision: 5}}, got)
	}
}

// TestChunkParserRefusesMalformed: a chunk cut short anywhere, or with a
// length past its message or a group, fails with ErrRangeChunk.
func TestChunkParserRefusesMalformed(t *testing.T) {
	_, b := testChunk(t)
	for cut := 1; cut < len(b); cut += 1 + cut/50 {
		_, err := parseChunk(b[:cut], 1000)
		require.ErrorIs(t, err, ErrRangeChunk, cut)
	}
	overrun := protowire.AppendTag(nil, 1, protowire.BytesType)
	overrun = protowire.AppendVarint(overrun, 3)
	overrun = protowire.AppendTag(overrun, 2, protowire.BytesType)
	overrun = protowire.AppendVarint(overrun, 10)
	overrun = append(overrun, make([]byte, 10)...)
	group := protowire.AppendTag(nil, 1, protowire.StartGroupType)
	badKV := protowire.AppendTag(nil, 1, protowire.BytesType)
	badKV = protowire.AppendBytes(badKV, append(protowire.AppendTag(nil, 2, protowire.BytesType), 0x80))
	deep := bytes.Repeat(protowire.AppendTag(nil, 1, protowire.StartGroupType), 1000)
	for name, b := range map[string][]byte{"overrun": overrun, "group": group, "deep groups": deep, "varint": {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "key value": badKV} {
		_, err := parseChunk(b, 2)
		require.ErrorIs(t, err, ErrRangeChunk, name)
	}
	stop := errors.New("stop")
	var p chunkParser
	_, good := testChunk(t)
	require.ErrorIs(t, p.each(buffers(good, 10), func(KeyValue) error { return stop }), stop, "emit's error is returned")
}

// FuzzRangeChunk checks the parser against protobuf: whatever protobuf
// decodes as a RangeStreamResponse, the parser reads the same KeyValues
// from, however it is split; nothing panics it.
func FuzzRangeChunk(f *testing.F) {
	m := &pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Kvs: []*mvccpb.KeyValue{
		{Key: []byte("/a"), CreateRevision: 1, ModRevision: 2, Version: 1, Value: []byte("x"), Lease: 3},
		{Key: []byte("/b"), CreateRevision: 4, ModRevision: 4, Version: 1},
	}, More: true, Header: &pb.ResponseHeader{Revision: 5}}}
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, uint8(3))
	f.Add(b[:len(b)-2], uint8(1))
	f.Add([]byte{0x0a, 0x02, 0x12, 0x00}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		got, err := parseChunk(data, int(split)+1)
		if err != nil && !errors.Is(err, ErrRangeChunk) {
			t.Fatalf("error %v does not match ErrRangeChunk", err)
		}
		var m pb.RangeStreamResponse
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		if err != nil {
			t.Fatalf("protobuf decodes %x, the parser fails: %v", data, err)
		}
		sameKVs(t, decodedKVs(&m), got, "protobuf against the parser")
	})
}
